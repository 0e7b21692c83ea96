"""The Ding German-English dictionary (Debian package trans-de-en, GPL-2+): aligned phrases and example sentences."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair
from transduce.training.data.fetch import apt_extract, deb_name

PACKAGE = "trans-de-en"
DICT_FILE = "usr/share/trans/de-en"
# {f} {pl} genders/grammar, [techn.] domains, <Hs.> search keys, (Gebäude) glosses, and spaced /Abk./ abbreviations
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|\([^)]*\)|(?:^|(?<=\s))/[^/]+/(?=\s|$|[;,])")


def strip_annotations(text: str) -> str:
    """Remove {f}, [techn.], <...>, (...) and /abbr./ annotations; collapse spaces."""
    return " ".join(_ANNOTATION.sub(" ", text).split()).strip(" ;,")


def _alternatives(part: str) -> list[str]:
    return [a for a in (strip_annotations(x) for x in part.split(";")) if a]


def parse_line(line: str) -> Iterator[tuple[str, str]]:
    """(de, en) pairs of one ``German | sub :: English | sub`` line.

    Sub-entries pair up by position (only when both sides have as many); within a sub-entry the ``;`` alternatives
    are synonyms, so each alternative of the longer side is paired with the one at the same index on the shorter
    side (or its last).
    """
    if line.startswith("#") or " :: " not in line:
        return
    de_side, en_side = line.rstrip("\n").split(" :: ", 1)
    de_parts, en_parts = de_side.split(" | "), en_side.split(" | ")
    if len(de_parts) != len(en_parts):
        return
    for de_part, en_part in zip(de_parts, en_parts, strict=True):
        de_alts, en_alts = _alternatives(de_part), _alternatives(en_part)
        if not de_alts or not en_alts:
            continue
        for i in range(max(len(de_alts), len(en_alts))):
            yield de_alts[min(i, len(de_alts) - 1)], en_alts[min(i, len(en_alts) - 1)]


def pairs(work: Path, meta: dict[str, Any] | None = None, *, progress: bool = False) -> Iterator[Pair]:
    """All aligned entries of /usr/share/trans/de-en from the downloaded package."""
    meta = {} if meta is None else meta
    root = apt_extract(PACKAGE, work)
    if root is None:
        meta["skipped"] = f"Debian package {PACKAGE} not available"
        return
    meta["package"] = deb_name(root, PACKAGE)
    with open(root / DICT_FILE, encoding="utf-8", errors="replace") as f:
        for line in f:
            for de, en in parse_line(line):
                yield Pair("ding", en, de)
