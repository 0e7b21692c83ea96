"""Where the markup and terms of a sentence go in its translation when the model lost their placeholders
(``htmlunits.Unit`` places them: a lost start tag before the last word ahead of its end tag, a lost end tag after the
first word behind its start tag, a lost pair around the element's own text or the words its source span maps onto,
never empty; a lost atom or term after the word nearest where it maps; a swapped pair swapped back)."""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from transduce.service.htmlnodes import Atom, Inline, Node, Term
from transduce.service.placeholders import SPACES, WORDY

_NON_SPACE = re.compile(r"\S+")
_WORD = re.compile(r"\w+(?:[-'’.]\w+)*")  # a word of a translation, for placing what the model lost


@dataclass
class Mark:
    """A start tag, end tag, atom or term at ``offset`` of the unit's text."""

    kind: Literal["open", "close", "atom", "term"]
    node: Inline | Atom | Term
    offset: int

    @property
    def end(self) -> int:
        """Where the text the mark covers ends (a term's source text; markup covers none)."""
        return self.offset + len(self.node.source) if isinstance(self.node, Term) else self.offset


@dataclass
class SentenceSpan:
    """A sentence span of the unit's text, what is sent for it, and the placeholders it holds."""

    start: int
    end: int
    text: str  # sent to the model
    ids: dict[int, int]  # placeholder number -> mark index
    literal: set[int]  # numbers written as [n] in the sentence itself (text, not placeholders)
    fixed: bool = False  # only terms to put in (and markup, punctuation): not sent, its own translation


def flatten(nodes: Sequence[Node], text: list[str], marks: list[Mark], size: int) -> int:
    """Append the text of ``nodes`` to ``text`` and their markup to ``marks``; returns the new text length."""
    for node in nodes:
        if isinstance(node, str):
            text.append(node)
            size += len(node)
        elif isinstance(node, Atom):
            marks.append(Mark("atom", node, size))
        elif isinstance(node, Term):
            marks.append(Mark("term", node, size))
            text.append(node.source)
            size += len(node.source)
        else:
            marks.append(Mark("open", node, size))
            size = flatten(node.children, text, marks, size)
            marks.append(Mark("close", node, size))
    return size


def word_before(text: Sequence[str], at: int) -> bool:
    """Whether a word ends at ``at`` of ``text``: a letter, digit or "_" before it, combining marks after it included
    (Hindi's and Thai's vowel signs end words, and ``\\w`` has none; an emoji's variation selector is no word)."""
    while at > 0 and unicodedata.category(text[at - 1]).startswith("M"):
        if text[at - 1] == "\ufe0f" or unicodedata.category(text[at - 1]) == "Me":  # an emoji: "1️⃣", "ℹ️"
            return False
        at -= 1
    return at > 0 and (text[at - 1].isalnum() or text[at - 1] == "_")


def word_after(text: str, at: int) -> bool:
    """Whether a word starts at ``at`` of ``text`` (``word_before``'s other side)."""
    return at < len(text) and (text[at].isalnum() or text[at] == "_")


def _target_text(nodes: Sequence[Node]) -> str:
    """The text of ``nodes`` as the translation should hold it verbatim: terms as their targets, atoms left out."""
    return "".join(
        n if isinstance(n, str) else n.target if isinstance(n, Term) else _target_text(getattr(n, "children", ()))
        for n in nodes
    )


class Placement:
    """Placing the marks the model lost, on a unit's text and marks (``htmlunits.Unit``)."""

    text: str  # the unit's text
    marks: list[Mark]  # its markup and terms, in order
    _index: dict[tuple[int, str], int]  # (id of a node, its kind) -> its mark's index

    def _word_guards(self, mark: Mark) -> tuple[bool, bool]:
        """Whether ``mark`` may not be glued to a word before it, and after it, in the translation: a term never; a
        run kept as written only where its source did not touch a word on that side."""
        if not isinstance(mark.node, Term):
            return False, False
        if not mark.node.glued:
            return True, True
        before, after = word_before(self.text, mark.offset), word_after(self.text, mark.end)
        return not before, not after

    def _reattach(self, sentence: SentenceSpan, text: str, positions: dict[int, int]) -> str:
        """Place the sentence's marks the model lost (the text, with the lost terms put in, is returned), and swap
        back an end tag it put before its start tag."""
        ids = set(sentence.ids.values())
        lost = [i for i in sorted(ids) if i not in positions]
        text = self._put([i for i in lost if self.marks[i].kind in ("atom", "term")], sentence, text, positions)
        tags = [i for i in lost if self.marks[i].kind in ("open", "close")]
        if tags:  # what placing them looks up (the text no longer changes): its words, its runs of non-space
            lower, words = text.lower(), [w.span() for w in _WORD.finditer(text)]
            middles = [(start + end) / 2 for start, end in words]
            runs = [run.span() for run in _NON_SPACE.finditer(text)]
            starts, ends = [start for start, _ in runs], [end for _, end in runs]
        for i in tags:
            mark = self.marks[i]
            if mark.kind == "open":
                close = self._index[(id(mark.node), "close")]
                if close in ids and close not in positions:  # both lost
                    positions[i], positions[close] = self._pair_span(sentence, text, lower, words, middles, mark)
                else:  # before the last word ahead of its end tag (or of the sentence's end)
                    limit = positions.get(close, len(text))
                    k = bisect_left(starts, limit) - 1
                    positions[i] = starts[k] if k >= 0 else limit
        for i in tags:
            if self.marks[i].kind == "close" and i not in positions:  # after the first word behind its start tag
                k = bisect_right(ends, positions.get(self._index[(id(self.marks[i].node), "open")], 0))
                positions[i] = ends[k] if k < len(ends) else len(text)
        filled = self._fill_empty(sentence, ids, text, positions)  # elements around no word: around words instead
        tags += sorted(filled - set(tags))
        terms = sorted(
            (p, p + len(n.target)) for j, p in positions.items() if isinstance(n := self.marks[j].node, Term)
        )
        for i in tags:
            k = bisect_left(terms, (positions[i], -1)) - 1  # the last term that starts before it
            if k >= 0 and positions[i] < terms[k][1]:  # a tag put back never splits a term's words
                positions[i] = terms[k][1] if self.marks[i].kind == "close" else terms[k][0]
        swaps = {}
        kept = ids - set(tags)
        for i in kept:
            mark = self.marks[i]
            close = self._index[(id(mark.node), "close")] if mark.kind == "open" else -1
            if close in kept and positions[close] < positions[i]:
                swaps[i], swaps[close] = close, i
        if swaps:  # each takes the other's place (and order)
            placed = list(positions.items())
            positions.clear()
            positions.update((swaps.get(i, i), pos) for i, pos in placed)
        return text

    def _fill_empty(self, sentence: SentenceSpan, ids: set[int], text: str, positions: dict[int, int]) -> set[int]:
        """Put the sentence's elements that come back around no word of ``text``, though their source text has one,
        around words as a lost pair is (its own text if the translation kept it, else the words its source span maps
        onto), so none comes back empty and its text lost: the model kept placeholders but not the words between
        them (``Hello [1]`` for ``Hello [1] world``), or lost an end tag before punctuation. With a tag at the
        sentence's edge (not sent), the other goes before the last word or after the first. Returns the tags moved."""
        words = [w.span() for w in _WORD.finditer(text)]
        moved: set[int] = set()
        for i in sorted(ids) if words else ():
            mark = self.marks[i]
            if mark.kind == "open":
                close = self._index[(id(mark.node), "close")]
                if close not in ids and self.marks[close].offset > sentence.end:
                    continue  # the element goes on in the next sentence
                lo, hi = positions[i], positions.get(close, len(text))
            elif mark.kind == "close" and (start := self._index[(id(mark.node), "open")]) not in ids:
                if self.marks[start].offset < sentence.start:
                    continue  # the element began in the sentence before
                lo, hi = 0, positions[i]
            else:
                continue
            if lo > hi or not WORDY.search(_own_text(mark)) or WORDY.search(text[lo:hi]):
                continue  # a swapped pair (swapped back later), an element without words, or one around words
            if mark.kind == "close":
                positions[i] = words[0][1]
            elif close not in ids:
                positions[i] = words[-1][0]
            else:
                middles = [(a + b) / 2 for a, b in words]
                positions[i], positions[close] = self._pair_span(sentence, text, text.lower(), words, middles, mark)
                moved.add(close)
            moved.add(i)
        return moved

    def _scale(self, sentence: SentenceSpan, text: str, offset: int) -> float:
        """Where ``offset`` of the source sentence falls in ``text``, in proportion to the lengths."""
        return (offset - sentence.start) / max(sentence.end - sentence.start, 1) * len(text)

    def _pair_span(
        self,
        sentence: SentenceSpan,
        text: str,
        lower: str,
        words: list[tuple[int, int]],
        middles: list[float],
        mark: Mark,
    ) -> tuple[int, int]:
        """Where the start and end tags of ``mark``'s element go when both are to be placed: around its own text if
        the translation kept it (``lower``: the text lower-cased), else around the ``words`` whose middle falls where
        its source span maps (the word nearest to it when none does), so it never comes back empty."""
        own = _own_text(mark)
        at = _find(text, lower, own)
        if at >= 0:
            return at, at + len(own)
        close = self.marks[self._index[(id(mark.node), "close")]]
        lo, hi = self._scale(sentence, text, mark.offset), self._scale(sentence, text, close.offset)
        inside = words[bisect_left(middles, lo) : bisect_left(middles, hi)]
        if not inside:  # the nearest is just before or after the middle
            k = bisect_left(middles, (lo + hi) / 2)
            inside = sorted(words[max(k - 1, 0) : k + 1], key=lambda w: abs(w[0] + w[1] - lo - hi))[:1]
        return (inside[0][0], inside[-1][1]) if inside else (len(text), len(text))

    def _put(self, lost: list[int], sentence: SentenceSpan, text: str, positions: dict[int, int]) -> str:
        """Put lost atoms and terms where their source offsets map: after the nearest word's end (before the final
        punctuation), with a space when the source had one before it; at the start when no word came before it.
        All are placed on the translation as it came back, then put in at once (in source order where they meet)."""
        if not lost:
            return text
        terms = [(p, p + len(t.target)) for j, p in positions.items() if isinstance(t := self.marks[j].node, Term)]
        # word ends, but not those inside a term already in the text: a term's target is never split
        ends = [w.end() for w in _WORD.finditer(text)]
        ends = [end for end in ends if not any(a < end < b for a, b in terms)]
        first = re.search(r"\w", self.text[sentence.start : sentence.end])
        words_from = sentence.start + first.start() if first else sentence.end  # where the source's words start
        places = []  # (where, source order, space before, the mark)
        for k, i in enumerate(lost):
            mark = self.marks[i]
            if not ends or mark.offset <= words_from:
                places.append((0, k, "", i))
                continue
            x = self._scale(sentence, text, mark.offset)
            n = min(bisect_left(ends, x), len(ends) - 1)  # the nearest word end (the one before on a tie)
            at = ends[n - 1] if n and x - ends[n - 1] <= abs(ends[n] - x) else ends[n]
            spaced = self._word_guards(mark)[0] or self.text[mark.offset - 1].isspace()
            places.append((at, k, " " if spaced else "", i))
        places.sort()
        inserts, follow = {}, text[:1]
        for at, _, before, i in reversed(places):  # at the start, a term is spaced from what follows it
            node = self.marks[i].node
            after = " " if not at and isinstance(node, Term) and follow.strip() else ""
            inserts[i] = before + (node.target if isinstance(node, Term) else "") + after
            follow = follow if at else (inserts[i] or follow)[:1]
        out, added, new, prev = [], [0], {}, 0  # the new text; what was put in before each place; the marks put in
        for at, _, before, i in places:
            out += [text[prev:at], inserts[i]]
            new[i], prev = at + added[-1] + len(before), at
            added.append(added[-1] + len(inserts[i]))
        ats = [place[0] for place in places]
        for j, p in positions.items():  # a mark where one is put in stays before it
            positions[j] = p + added[bisect_left(ats, p)]
        positions.update(new)
        return "".join([*out, text[prev:]])


def _own_text(mark: Mark) -> str:
    """The text of ``mark``'s element as the target sees it, whitespace collapsed."""
    return SPACES.sub(" ", _target_text(getattr(mark.node, "children", ()))).strip()


def _find(text: str, lower: str, words: str) -> int:
    """Where ``words`` first occur in ``text`` (``lower``: lower-cased), ignoring case where that keeps offsets; -1
    when absent or empty."""
    if not words:
        return -1
    at = text.find(words)
    if at < 0 and len(lower) == len(text) and len(words.lower()) == len(words):
        at = lower.find(words.lower())
    return at
