"""Text cleaning and pair filters shared by every source; each filter counts what it removed for the data card."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_WS = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)


@dataclass(frozen=True)
class Pair:
    """One aligned example; ``split`` is fixed by the source (Bible chapters) or None (decided by hash). ``de`` is the
    non-English side: German for en-de, French for en-fr, ... (the TSV header names the language).

    ``group`` is the text whose hash decides the held-out slice (default: the English side); sources with several
    translations of one original (WMT references and system outputs) set it to the original text.
    """

    origin: str
    en: str
    de: str
    split: str | None = None
    group: str | None = None


def normalize(text: str) -> str:
    """NFC, no control characters, single spaces, stripped."""
    text = unicodedata.normalize("NFC", text)
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text)
    return _WS.sub(" ", text).strip()


def split_lines(text: str) -> list[str]:
    """Lines split at "\\n" only (``str.splitlines`` would also split at U+2028 etc. and break line alignment)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


@functools.cache
def _unmatched() -> dict[int, None]:
    """str.translate table deleting every Unicode punctuation and whitespace character."""
    return {
        i: None for i in range(sys.maxunicode + 1) if unicodedata.category(chr(i)).startswith("P") or chr(i).isspace()
    }


def match_key(text: str) -> str:
    """The form in which texts are compared for decontamination: NFKC, case-folded, without any punctuation or
    whitespace (so "Hello, world!" and "hello world" match)."""
    return unicodedata.normalize("NFKC", text).casefold().translate(_unmatched())


MAX_TOKENS = 200
MAX_RATIO = 3.0
RATIO_MIN_CHARS = 12
FILTERS = {
    "empty": "a side is empty after normalisation (NFC, control characters removed, whitespace collapsed)",
    "no_letters": "a side has no letter at all (numbers, punctuation, placeholders only)",
    "identical": "English and German texts are the same",
    "too_long": f"a side has more than {MAX_TOKENS} whitespace tokens",
    "length_ratio": f"longer/shorter side > {MAX_RATIO:g} in characters (when the longer side has > {RATIO_MIN_CHARS})",
    "duplicate": "exact (en, de) pair already seen in this source",
}


def clean_pairs(
    pairs: Iterable[Pair], removed: Counter[str], *, max_tokens: int = MAX_TOKENS, max_ratio: float = MAX_RATIO
) -> Iterator[Pair]:
    """Normalise, then drop empty, letter-less, identical, over-long, badly length-matched and duplicate pairs."""
    seen: set[tuple[str, str]] = set()
    for pair in pairs:
        en, de = normalize(pair.en), normalize(pair.de)
        if not en or not de:
            removed["empty"] += 1
        elif not _LETTER.search(en) or not _LETTER.search(de):
            removed["no_letters"] += 1
        elif en == de:
            removed["identical"] += 1
        elif len(en.split()) > max_tokens or len(de.split()) > max_tokens:
            removed["too_long"] += 1
        elif (longer := max(len(en), len(de))) > RATIO_MIN_CHARS and longer / min(len(en), len(de)) > max_ratio:
            removed["length_ratio"] += 1
        elif (en, de) in seen:
            removed["duplicate"] += 1
        else:
            seen.add((en, de))
            yield Pair(pair.origin, en, de, pair.split, pair.group)
