"""The placeholders a model gives back for markup and glossary terms (``htmlunits.Unit`` sends them as ``[1]``): as
sent, or in the forms the model learned elsewhere (printf-style ``%1``, ``=1]``, junk such as ``[URL]``); and when a
translation of placeholders alone is translated again without them (``plain_retry``)."""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right
from collections.abc import Iterable

PLACEHOLDER = re.compile(r"\[\s*(\d{1,6})\s*\]")  # a placeholder as sent ([3]) or as the model may give it back ([ 3 ])
# ... or, having learned placeholders from software messages, as a printf-style specifier: %3, %3$s, »%s«, with
# runs of "$1" it sometimes adds; read as placeholders only when the sentence sent has no "%" of its own
_PRINTF_MARK = re.compile(r"[»«„“\"]?%(?:(\d{1,6})(?:\$\d*[sd]?)*|[sd](?![^\W\d_]))[«»“\"]?")
_DOLLAR_RUN = re.compile(r"(?:\$\d*[sd]?)+")  # its "$1$1$s" runs: dropped when the sentence sent has no "$"
# ... or with its "[" turned into "=" ("=1]", "=15]", "=1"), or with a bracket doubled ("[1]]"): read so only in a
# sentence sent with placeholders and no "=" (no bracket) of its own outside them
_EQUALS_MARK = re.compile(r"=(\d{1,6})\]?")
_EQUALS_RUN = re.compile(r"=(?!\d)(?:[ \t]*=(?!\d))+")  # "= =": a wiki heading's marks, learned in training: junk
_BRACKET = re.compile(r"[\[\]]")
_HALF_MARK = re.compile(r"(?<![\w\[])(\d{1,6})\]")  # a placeholder without its "[": "2]"
_WORDY_PAIR = re.compile(r"\[[^\[\]]*?[^\W\d][^\[\]]*\]")  # brackets around a word ("[c]"; not "[12]" nor "[!]")
_BRACKET_JUNK = re.compile(r"\[[^\w\[\]\s]{0,2}\s*\d{1,6}\s*[^\w\[\]\s]{0,2}\]?|\[[A-Z][A-Z_]{1,15}\d{0,3}\]?")
SPACES = re.compile(r"[ \t\n\r\f]+")
WORDY = re.compile(r"\w")

# placeholders of a translation, each with its number (``found_placeholders``)
Found = list[tuple[re.Match[str], int | None]]


def found_placeholders(translation: str, sent: str) -> Found:
    """The placeholders of a translation in order, each with its number: ``[n]``; printf-style ones when ``sent``
    (what the model was given) has no "%" (``%s``: None, the sentence's only placeholder if it has one); "$1$s" runs
    when it has no "$" either (0: invented, dropped)."""
    found: list[tuple[re.Match[str], int | None]] = [(m, int(m.group(1))) for m in PLACEHOLDER.finditer(translation)]
    if "%" in translation and "%" not in sent:
        found += [(m, int(m.group(1)) if m.group(1) else None) for m in _PRINTF_MARK.finditer(translation)]
        if "$" not in sent:
            found += _outside(found, ((m, 0) for m in _DOLLAR_RUN.finditer(translation)))
    own = PLACEHOLDER.sub("", sent)  # the sentence sent without its placeholders
    if own != sent and "=" in translation and "=" not in own:
        found += _outside(found, ((m, int(m.group(1))) for m in _EQUALS_MARK.finditer(translation)))
        found += _outside(found, ((m, 0) for m in _EQUALS_RUN.finditer(translation)))
    if own != sent and "[" not in own and "]" not in own:  # the sentence sent has no bracket of its own, so
        # placeholders of the kinds the model met in training ("[;0]", "[:15", "[URL]", "[PERSON1") are junk (dropped)
        found += _outside(found, ((m, 0) for m in _BRACKET_JUNK.finditer(translation)))
        # a placeholder the translation lacks, given back without its "[" ("2]"), is read as one (a number that is
        # none, or that the sentence has as text, stays: "112]" keeps its 112); every bracket but a pair around
        # words of the translation's own ("[c]") is junk: one that stood apart ("Привет [ und", "[!]") reached the
        # output when only those touching a placeholder were dropped
        missing = {int(n) for n in PLACEHOLDER.findall(sent)} - {n for _, n in found}
        missing -= {int(n) for n in re.findall(r"(?<!\d)\d{1,6}(?!\d)", own)}  # (as text: "chapter 2" keeps its 2)
        halves = (m for m in _HALF_MARK.finditer(translation) if int(m.group(1)) in missing)
        found += _outside(found, ((m, int(m.group(1))) for m in halves))
        pairs = [m.span() for m in _WORDY_PAIR.finditer(translation)]
        held = {start for start, _ in pairs} | {end - 1 for _, end in pairs}
        found += _outside(found, ((m, 0) for m in _BRACKET.finditer(translation) if m.start() not in held))
    found.sort(key=lambda item: item[0].start())
    return found


def has_word(translation: str, sent: str, found: Found | None = None) -> bool:
    """Whether ``translation`` of ``sent`` has a word outside its placeholders and their junk (``found``, when they
    are known: ``found_placeholders``)."""
    at, words = 0, []
    for match, _ in found_placeholders(translation, sent) if found is None else found:
        words.append(translation[at : match.start()])
        at = match.end()
    return bool(WORDY.search("".join([*words, translation[at:]])))


def plain_retry(sent: str, translation: str) -> str | None:
    """What to translate again when the model gave back placeholders (or their junk) and no word for ``sent``, a
    sentence with placeholders and words: ``sent`` without its placeholders, whose translation then places the
    markup as for lost placeholders; None when ``translation`` will do."""
    if not PLACEHOLDER.search(sent) or has_word(translation, sent):
        return None
    plain = SPACES.sub(" ", PLACEHOLDER.sub(" ", sent)).strip()
    return plain if WORDY.search(plain) else None


def _outside(
    found: list[tuple[re.Match[str], int | None]], more: Iterable[tuple[re.Match[str], int | None]]
) -> list[tuple[re.Match[str], int | None]]:
    """Those of ``more`` that start outside every placeholder already ``found`` (linear: a file's unit may hold
    thousands of them)."""
    taken = sorted(m.span() for m, _ in found)
    starts, reach = [a for a, _ in taken], list(itertools.accumulate((b for _, b in taken), max))
    kept = []
    for m, n in more:
        k = bisect_right(starts, m.start()) - 1
        if k < 0 or reach[k] <= m.start():
            kept.append((m, n))
    return kept
