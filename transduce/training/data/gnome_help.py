"""GNOME help (CC-BY-SA 3.0): the Mallard pages of Debian's gnome-user-docs, ``help/C/<guide>/*.page`` (English) and
``help/de/<guide>/*.page`` (German), paired element by element (title, desc and p, in document order). A page whose
two versions have different numbers of such elements is skipped; an element with an empty ``<link>`` (text filled
in from another page at display time) is left out."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair
from transduce.training.data.fetch import apt_extract, deb_name
from transduce.training.data.gettext_mo import usable

PACKAGE = "gnome-user-docs"
HELP = "usr/share/help"
TEXT_ELEMENTS = {"title", "desc", "p"}
SKIP_SUBTREES = {"credit", "license", "revision"}


def local(tag: str) -> str:
    """``p`` from ``{http://projectmallard.org/1.0/}p``."""
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


SEQUENCES = {"keyseq": "+", "guiseq": " ▸ "}  # how yelp displays key combinations and menu paths


def text(element: ET.Element) -> str:
    """An element's displayed text: nested markup flattened, ``<keyseq>``/``<guiseq>`` parts joined as yelp shows
    them (Ctrl+Alt+Delete, Settings ▸ Network)."""
    joiner = SEQUENCES.get(local(element.tag))
    if joiner is not None:
        return joiner.join(text(child) for child in element)
    return (element.text or "") + "".join(text(child) + (child.tail or "") for child in element)


def _has_empty_link(element: ET.Element) -> bool:
    return any(local(e.tag) == "link" and not "".join(e.itertext()).strip() for e in element.iter())


def segments(xml: str) -> list[str | None]:
    """The page's title/desc/p texts in document order (None for one with an empty link); [] if it does not parse."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    out: list[str | None] = []

    def walk(element: ET.Element) -> None:
        name = local(element.tag)
        if name in SKIP_SUBTREES:
            return
        if name in TEXT_ELEMENTS:
            out.append(None if _has_empty_link(element) else " ".join(text(element).split()))
            return
        for child in element:
            walk(child)

    walk(root)
    return out


def align_page(en_xml: str, de_xml: str) -> Iterator[tuple[str, str]] | None:
    """(en, de) of the page's elements, or None when the two versions have different element counts."""
    en, de = segments(en_xml), segments(de_xml)
    if not en or len(en) != len(de):
        return None
    return ((a, b) for a, b in zip(en, de, strict=True) if a is not None and b is not None and usable(a, b))


def pairs(work: Path, meta: dict[str, Any] | None = None, *, progress: bool = False) -> Iterator[Pair]:
    """Download gnome-user-docs (no installation) and pair every page that has a German version."""
    meta = {} if meta is None else meta
    root = apt_extract(PACKAGE, work)
    if root is None:
        meta["skipped"] = f"Debian package {PACKAGE} not available"
        return
    en_root, de_root = root / HELP / "C", root / HELP / "de"
    pages = sorted(p.relative_to(en_root) for p in en_root.rglob("*.page"))
    both = [p for p in pages if (de_root / p).exists()]
    skipped = []
    for page in both:
        aligned = align_page(
            (en_root / page).read_text(encoding="utf-8", errors="replace"),
            (de_root / page).read_text(encoding="utf-8", errors="replace"),
        )
        if aligned is None:
            skipped.append(page.as_posix())
            continue
        for en, de in aligned:
            yield Pair("gnome-help", en, de)
    meta.update(package=deb_name(root, PACKAGE), pages={"en": len(pages), "both": len(both), "skipped": len(skipped)})
    if skipped:
        meta["pages_skipped_counts_differ"] = skipped
