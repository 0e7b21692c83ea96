"""Sentence splitting that keeps the original whitespace, so translations re-join with the same layout.

The service, ``transduce translate`` and the tests all split and re-join through ``segment`` and ``Segmented.rejoin``.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transduce.textmarks import EDGE_MARKS, LINE_BREAKS

# a sentence ends at . ! ? … (plus closing quotes/brackets) followed by whitespace and no lower-case letter
# ("e.g. this" stays whole, however many spaces follow "e.g."), or at a line break (LINE_BREAKS)
_BOUNDARY = re.compile(rf"(?<=[.!?…])[\"'”’»)\]]*\s+(?![a-zà-ÿ\s])|[{LINE_BREAKS}]\s*")
_EDGE = re.compile(rf"[\s{EDGE_MARKS}]*")


def _edge(text: str) -> int:
    """How many characters at the start of ``text`` are whitespace or ``EDGE_MARKS`` (matched from the start only:
    linear however long the run)."""
    found = _EDGE.match(text)
    return found.end() if found else 0


@dataclass(frozen=True)
class Segmented:
    """A text cut into sentences, each with the whitespace that followed it; no sentences for a blank text.

    ``leading`` is the whitespace before the first sentence (all of a blank text), so ``rejoin`` gives back the
    text's own leading and trailing whitespace around the translations."""

    sentences: tuple[str, ...]
    separators: tuple[str, ...]  # separators[i] follows sentences[i] (the text's trailing whitespace after the last)
    leading: str = ""

    def rejoin(self, translations: Sequence[str]) -> str:
        """The translations of ``sentences``, in order, each followed by its source sentence's whitespace, after
        the source's leading whitespace."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        return self.leading + "".join(t + sep for t, sep in zip(translations, self.separators, strict=True))


# words whose period does not end a sentence (as Moses' non-breaking prefixes): titles and name parts always, a
# single capital letter (an initial: "J. R. R. Tolkien"), and number prefixes when a digit follows ("No. 5", "Nr. 3")
TITLES = frozenset("Mr Mrs Ms Dr Prof Sr Jr St Mt Rev Gen Col Lt Sgt Capt Hon Hr Fr Frl Dipl Ing Mag Hrsg".split())  # noqa: SIM905
NUMBER_PREFIXES = frozenset("No Nos Nr Vol Fig Figs Abb Abs Art Kap Chap Sec Tab pp p S".split())  # noqa: SIM905
_BEFORE_PERIOD = re.compile(r"(?:^|[\s(\[\"'“‘«„])([^\W\d_]+)\.$")
_DIGIT_NEXT = re.compile(r"\s*\d")  # at a position: no copy of the rest of the text at every "No." (quadratic)


def _holds(body: str, end: int) -> bool:
    """Whether the period just before ``end`` in ``body`` belongs to an abbreviation that does not end a sentence."""
    word = _BEFORE_PERIOD.search(body, max(0, end - 12), end)
    if word is None:
        return False
    w = word.group(1)
    if w in TITLES or (len(w) == 1 and w.isupper() and w != "I"):  # "So did I. Then ..." ends there
        return True
    return w in NUMBER_PREFIXES and _DIGIT_NEXT.match(body, end) is not None


def has_letters(text: str) -> bool:
    """Whether ``text`` has a letter (of any script): one without (a number, punctuation, symbols, emoji, control
    characters) is given back as it is, never decoded, as a model only makes something up for it."""
    return any(c.isalpha() for c in text)


def segment(text: str) -> Segmented:
    """Split ``text`` into sentences with no whitespace (nor ``EDGE_MARKS``) at either end; ``rejoin(sentences)``
    gives back ``text``."""
    body = text[_edge(text) :]
    sentences: list[str] = []
    separators: list[list[str]] = []  # each one's parts, joined at the end (a string grown with += was quadratic)

    def add(piece: str, separator: str) -> None:
        # edge marks that begin it (after a break) belong to the separator before; whitespace and edge marks before a
        # line break or at the very end, to the separator after
        lead = _edge(piece) if sentences else 0  # (the first piece begins after the text's leading ones)
        if lead:
            separators[-1].append(piece[:lead])
            piece = piece[lead:]
        sentence = piece[: len(piece) - _edge(piece[::-1])]
        if not sentence and sentences:  # edge marks alone between two breaks: with the separator before them
            separators[-1] += [piece, separator]
            return
        sentences.append(sentence)
        separators.append([piece[len(sentence) :], separator])

    start = 0
    for match in _BOUNDARY.finditer(body):
        broken = any(c in LINE_BREAKS for c in match.group())  # a line break always ends a sentence
        if not broken and body[match.start() - 1 : match.start()] == "." and _holds(body, match.start()):
            continue  # "Dr. Smith", "J. R. R. Tolkien", "No. 5": one sentence
        sep_start = match.start()
        # keep closing quotes/brackets with the sentence, only whitespace goes to the separator
        while sep_start < match.end() and not body[sep_start].isspace():
            sep_start += 1
        if sep_start > start:
            add(body[start:sep_start], body[sep_start : match.end()])
            start = match.end()
    if start < len(body):
        add(body[start:], "")
    return Segmented(tuple(sentences), tuple("".join(parts) for parts in separators), text[: len(text) - len(body)])


_ENDS_SENTENCE = re.compile(r"[\s.!?…]")  # what could end a sentence: hidden inside a span kept whole


def segment_around(text: str, keep: Sequence[tuple[int, int]]) -> Segmented:
    """``segment(text)`` that ends no sentence inside a span of ``keep`` ((start, end) offsets: a glossary term or a
    run the model cannot spell, which the service masks whole, so "Acme Inc." does not end a sentence)."""
    if not keep:
        return segment(text)
    view = list(text)
    for start, end in keep:
        view[start:end] = _ENDS_SENTENCE.sub("_", text[start:end])
    seen = segment("".join(view))  # the same lengths: its pieces are read back from ``text`` at the same offsets
    at = len(seen.leading)
    sentences, separators = [], []
    for sentence, separator in zip(seen.sentences, seen.separators, strict=True):
        sentences.append(text[at : at + len(sentence)])
        separators.append(text[at + len(sentence) : at + len(sentence) + len(separator)])
        at += len(sentence) + len(separator)
    return Segmented(tuple(sentences), tuple(separators), text[: len(seen.leading)])


_CLAUSE = re.compile(r"[,;:)\]](?=\s)|\s[-–—](?=\s)")  # where a sentence may be cut short of a sentence end
_TRIED_CUTS = 8  # with spans to keep whole: cut points tried (each a probe) before a part ends where it stops fitting


_FIRST_PROBE = 64  # characters: split_long's first prefix


def split_long(sentence: str, fits: Callable[[str], bool], keep: Sequence[tuple[int, int]] = ()) -> list[str]:
    """``sentence`` cut into consecutive parts that each ``fits`` (e.g. within a token limit); joined they give back
    ``sentence``. A part ends after the last clause mark (, ; : ) or a spaced dash) in the second half of the longest
    prefix that fits, else at its last space, else (one long word) where it stops fitting; each part keeps the
    whitespace that follows it. No part ends inside a span of ``keep`` ((start, end) offsets: a glossary term, which
    counts as one placeholder only whole) unless no cut outside one fits."""
    if not sentence or fits(sentence):  # (most do: one probe)
        return [sentence] if sentence else []
    parts: list[str] = []
    at = 0
    while at < len(sentence):
        rest = sentence[at:]
        lo = _longest_fitting(rest, fits)
        if lo == len(rest):
            break
        inside = [(a - at, b - at) for a, b in keep if b > at]
        cut = _cut(rest, lo, inside, fits)
        parts.append(rest[:cut])
        at += cut
    if at < len(sentence):
        parts.append(sentence[at:])
    return parts


def _cut(rest: str, lo: int, keep: Sequence[tuple[int, int]], fits: Callable[[str], bool]) -> int:
    """Where the part that starts ``rest`` ends (``split_long``), its whitespace after it included; ``lo``: the
    longest prefix that fits. Outside ``keep``'s spans, whose count is not a prefix's, each cut is probed."""
    window = rest[:lo]
    marks = [m.end() for m in _CLAUSE.finditer(window) if m.end() > lo // 2]
    space = window.rstrip().rfind(" ")
    if keep:
        spaces = (at for at in range(len(window.rstrip()) - 1, 0, -1) if window[at] == " ")  # the last first
        candidates = itertools.chain(reversed(marks), spaces, (lo,))
        starts = [a for a, _ in keep]  # (the spans do not overlap, in order)

        def inside(at: int) -> bool:  # within the last span that starts before it
            k = bisect.bisect_left(starts, at) - 1
            return k >= 0 and keep[k][1] > at

        outside = itertools.islice((c for c in candidates if not inside(c)), _TRIED_CUTS)
        fitting = (c for c in outside if fits(rest[: _after_space(rest, c)]))
        return _after_space(rest, next(fitting, lo))
    return _after_space(rest, marks[-1] if marks else space if space > 0 else lo)


def _after_space(text: str, at: int) -> int:
    """``at`` moved past the whitespace that follows it (it stays with the part before)."""
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _longest_fitting(text: str, fits: Callable[[str], bool]) -> int:
    """The length of the longest prefix of ``text`` that ``fits`` (fits() grows with length; at least 1). A probe
    costs its prefix's length (a tokenizer runs over it), so it gallops up from a short prefix, then bisects:
    probing the whole rest first, then half of it, was quadratic in a long line (each part cut off a 40,000-character
    line probed 40,000 and 20,000 characters)."""
    lo, probe = 0, min(_FIRST_PROBE, len(text))
    while fits(text[:probe]):
        lo = probe
        if probe == len(text):
            return lo
        probe = min(2 * probe, len(text))
    lo, hi = max(lo, 1), probe - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(text[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo
