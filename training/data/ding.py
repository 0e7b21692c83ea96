"""The Ding German-English dictionary (Debian package trans-de-en, GPL-2+): aligned phrases and example sentences."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from training.data.clean import Pair
from training.data.fetch import apt_extract

_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|/[^/]*/|\([^)]*\)")


def strip_annotations(text: str) -> str:
    """Remove {f}, [techn.], <...>, /abbr./ and (...) annotations."""
    return " ".join(_ANNOTATION.sub(" ", text).split()).strip(" ;,")


def parse_line(line: str) -> Iterator[tuple[str, str]]:
    """(de, en) pairs of one ``German | sub :: English | sub`` line; alternatives pair up when their counts agree."""
    if line.startswith("#") or " :: " not in line:
        return
    de_side, en_side = line.rstrip("\n").split(" :: ", 1)
    de_parts, en_parts = de_side.split(" | "), en_side.split(" | ")
    if len(de_parts) != len(en_parts):
        return
    for de_part, en_part in zip(de_parts, en_parts, strict=True):
        de_alts = [strip_annotations(a) for a in de_part.split(";")]
        en_alts = [strip_annotations(a) for a in en_part.split(";")]
        if len(de_alts) == len(en_alts):
            yield from zip(de_alts, en_alts, strict=True)
        else:
            yield de_alts[0], en_alts[0]


def pairs(work: Path) -> Iterator[Pair]:
    """All aligned entries of /usr/share/trans/de-en from the downloaded package."""
    root = apt_extract("trans-de-en", work)
    if root is None:
        return
    with open(root / "usr/share/trans/de-en", encoding="utf-8", errors="replace") as f:
        for line in f:
            for de, en in parse_line(line):
                yield Pair("ding", en, de)
