"""Debian package descriptions: the archive's Translation-en and Translation-de indexes, matched by
(package, Description-md5); short descriptions and long-description paragraphs when their counts agree."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair

log = logging.getLogger("transduce.data")
LISTS = Path("/var/lib/apt/lists")


def parse_index(text: str, lang: str) -> dict[tuple[str, str], list[str]]:
    """(package, md5) -> [short description, paragraph, paragraph, ...] of one Translation-xx index."""
    out: dict[tuple[str, str], list[str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith(" ") and key:
                fields[key] += "\n" + line[1:]
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        body = fields.get(f"Description-{lang}")
        if body is None or "Package" not in fields:
            continue
        short, _, long = body.partition("\n")
        paragraphs = [" ".join(p.split()) for p in long.split("\n.\n") if p.strip() and p.strip() != "."]
        out[(fields["Package"], fields.get("Description-md5", ""))] = [short, *paragraphs]
    return out


def align(en: dict[tuple[str, str], list[str]], de: dict[tuple[str, str], list[str]]) -> Iterator[tuple[str, str]]:
    """(en, de) text pairs of entries present in both indexes."""
    for key, de_parts in sorted(de.items()):
        en_parts = en.get(key)
        if not en_parts:
            continue
        yield en_parts[0], de_parts[0]
        if len(en_parts) == len(de_parts):
            yield from zip(en_parts[1:], de_parts[1:], strict=True)


def _read(path: Path) -> str:
    """A (possibly compressed) apt list file as text, via apt's own helper."""
    return subprocess.run(
        ["/usr/lib/apt/apt-helper", "cat-file", str(path)], capture_output=True, text=True, check=True
    ).stdout


def _indexes(lists: Path, lang: str) -> list[Path]:
    return sorted(p for p in lists.glob(f"*_main_i18n_Translation-{lang}*") if not p.name.endswith(".diff"))


def snapshot(work: Path, lists: Path = LISTS) -> dict[str, Path]:
    """Copy apt's Translation-en/-de indexes (decompressed) into work/debian once; later builds reuse that copy.

    When apt has no German index yet, run ``apt-get update -o Acquire::Languages=en,de`` first.
    """
    target = work / "debian"
    cached = {lang: target / f"Translation-{lang}" for lang in ("en", "de")}
    if all(p.exists() for p in cached.values()):
        return cached
    if lists == LISTS and not (_indexes(lists, "en") and _indexes(lists, "de")):
        result = subprocess.run(
            ["apt-get", "update", "-qq", "-o", "Acquire::Languages=en,de"], capture_output=True, text=True
        )
        if result.returncode != 0:
            log.warning("apt-get update failed (%s); using the lists already present", result.stderr.strip()[-200:])
    found = {lang: _indexes(lists, lang) for lang in ("en", "de")}
    if not all(found.values()):
        return {}
    target.mkdir(parents=True, exist_ok=True)
    for lang, files in found.items():
        tmp = cached[lang].with_suffix(".tmp")
        tmp.write_text("\n\n".join(_read(f).strip("\n") for f in files) + "\n", encoding="utf-8")
        tmp.replace(cached[lang])
    (target / "SOURCES").write_text("".join(f"{f.name}\n" for files in found.values() for f in files))
    return cached


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, lists: Path = LISTS, progress: bool = False
) -> Iterator[Pair]:
    """Align the archive's English and German package descriptions (snapshotted in the work folder)."""
    meta = {} if meta is None else meta
    files = snapshot(work, lists)
    if not files:
        log.warning("no Translation-en/-de indexes under %s; skipping Debian descriptions", lists)
        meta["skipped"] = "no Translation-en/-de indexes"
        return
    sources = files["en"].parent / "SOURCES"
    meta["indexes"] = sources.read_text().split() if sources.exists() else [str(f) for f in files.values()]
    en = parse_index(files["en"].read_text(encoding="utf-8"), "en")
    de = parse_index(files["de"].read_text(encoding="utf-8"), "de")
    meta["descriptions"] = {"en": len(en), "de": len(de), "both": len(en.keys() & de.keys())}
    for en_text, de_text in align(en, de):
        yield Pair("debian", en_text, de_text)
