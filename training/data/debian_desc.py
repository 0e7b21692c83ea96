"""Debian package descriptions: the archive's Translation-en and Translation-de indexes, matched by
(package, Description-md5); short descriptions and long-description paragraphs when their counts agree."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

from training.data.clean import Pair

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
    return subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", str(path)], capture_output=True, text=True,
                          check=True).stdout


def pairs(work: Path, lists: Path = LISTS) -> Iterator[Pair]:
    """Refresh apt's lists with English and German descriptions, then align them."""
    if lists == LISTS:
        result = subprocess.run(["apt-get", "update", "-qq", "-o", "Acquire::Languages=en,de"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            log.warning("apt-get update failed (%s); using the lists already present", result.stderr.strip()[-200:])
    en_files = sorted(lists.glob("*_main_i18n_Translation-en*"))
    de_files = sorted(lists.glob("*_main_i18n_Translation-de*"))
    if not en_files or not de_files:
        log.warning("no Translation-en/-de indexes under %s; skipping Debian descriptions", lists)
        return
    en: dict[tuple[str, str], list[str]] = {}
    de: dict[tuple[str, str], list[str]] = {}
    for f in en_files:
        en.update(parse_index(_read(f), "en"))
    for f in de_files:
        de.update(parse_index(_read(f), "de"))
    for en_text, de_text in align(en, de):
        yield Pair("debian", en_text, de_text)
