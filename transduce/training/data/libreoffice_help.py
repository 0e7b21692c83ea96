"""LibreOffice help (MPL-2.0): the HTML pages of Debian's libreoffice-help-en-us and libreoffice-help-de, aligned by
page path and element id (``par_id...`` paragraphs, ``hd_id...`` headings); an id that occurs a different number of
times on the two pages is left out."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transduce.training.data.clean import Pair
from transduce.training.data.fetch import apt_extract, deb_name
from transduce.training.data.gettext_mo import usable

PACKAGES = {"en": "libreoffice-help-en-us", "de": "libreoffice-help-de"}
HELP = {"en": "usr/share/libreoffice/help/en-US/text", "de": "usr/share/libreoffice/help/de/text"}
ID_PREFIXES = ("par_id", "hd_id")
_SKIP_TEXT = {"script", "style"}
_BLOCK = {"p", "div", "br", "li", "td", "th", "tr", "table", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6"}


class _Paragraphs(HTMLParser):
    """Collects the text of every element whose id starts with par_id/hd_id (nested markup flattened)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []
        self.open: list[tuple[str, str, int, list[str]]] = []  # (tag, id, depth of that tag, text parts)
        self.depth: dict[str, int] = {}
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TEXT:
            self.skip += 1
        if tag in _BLOCK:
            self.handle_data(" ")  # block boundaries separate words
        self.depth[tag] = self.depth.get(tag, 0) + 1
        ident = dict(attrs).get("id") or ""
        if ident.startswith(ID_PREFIXES):
            self.open.append((tag, ident, self.depth[tag], []))

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TEXT:
            self.skip = max(0, self.skip - 1)
        if tag in _BLOCK:
            self.handle_data(" ")
        while self.open and self.open[-1][0] == tag and self.open[-1][2] >= self.depth.get(tag, 0):
            _, ident, _, parts = self.open.pop()
            self.found.append((ident, " ".join("".join(parts).split())))
        self.depth[tag] = max(0, self.depth.get(tag, 0) - 1)

    def handle_data(self, data: str) -> None:
        if not self.skip:
            for _, _, _, parts in self.open:
                parts.append(data)


def paragraphs(html: str) -> dict[tuple[str, int], str]:
    """(element id, occurrence) -> text of one help page."""
    parser = _Paragraphs()
    parser.feed(html)
    parser.close()
    out: dict[tuple[str, int], str] = {}
    seen: dict[str, int] = {}
    for ident, text in parser.found:
        seen[ident] = seen.get(ident, 0) + 1
        out[(ident, seen[ident])] = text
    return out


def align_page(en_html: str, de_html: str) -> Iterator[tuple[str, str]]:
    """(en, de) texts of the ids both pages have the same number of times."""
    en, de = paragraphs(en_html), paragraphs(de_html)
    en_counts: dict[str, int] = {}
    de_counts: dict[str, int] = {}
    for counts, page in ((en_counts, en), (de_counts, de)):
        for ident, _ in page:
            counts[ident] = counts.get(ident, 0) + 1
    for key in sorted(en.keys() & de.keys()):
        if en_counts[key[0]] == de_counts[key[0]] and usable(en[key], de[key]):
            yield en[key], de[key]


def pairs(work: Path, meta: dict[str, Any] | None = None, *, progress: bool = False) -> Iterator[Pair]:
    """Download both Debian packages (no installation) and align every page present in both."""
    meta = {} if meta is None else meta
    roots = {lang: apt_extract(package, work) for lang, package in PACKAGES.items()}
    if roots["en"] is None or roots["de"] is None:
        meta["skipped"] = f"Debian packages {' / '.join(PACKAGES.values())} not available"
        return
    en_root, de_root = roots["en"] / HELP["en"], roots["de"] / HELP["de"]
    pages = sorted(p.relative_to(en_root) for p in en_root.rglob("*.html"))
    both = [p for p in pages if (de_root / p).exists()]
    meta.update(packages=[deb_name(r, PACKAGES[lang]) for lang, r in roots.items() if r is not None])
    meta.update(pages={"en": len(pages), "both": len(both)})
    for page in tqdm(both, desc="libreoffice help: pages", disable=not progress, file=sys.stderr, mininterval=1.0):
        en_html = (en_root / page).read_text(encoding="utf-8", errors="replace")
        de_html = (de_root / page).read_text(encoding="utf-8", errors="replace")
        for en, de in align_page(en_html, de_html):
            yield Pair("libreoffice", en, de)
