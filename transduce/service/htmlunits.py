"""One translatable unit of an HTML fragment: the inline content of a block (a paragraph, a list item, a table cell),
cut into sentences whose inline markup travels through the model as numbered placeholders, and put back together.

A unit is a small tree: text, inline elements (``<b>``, ``<a href>``, ``<span>``; translated with the sentence) and
atoms (``<code>``, ``<img>``, ``<br>``, an @mention, a comment: kept as they are, never translated). Its text is cut
into sentences as plain text is (``segment``), with a ``<br>`` always ending one and line breaks inside a paragraph
read as spaces (HTML renders them so). Markup at a sentence's edges (a link around a whole list item, a bold heading,
a mention that opens a post) never reaches the model: it stays where it was. Markup inside a sentence becomes
placeholders: ``Click <b>Save</b> now.`` is sent as ``Click [1] Save [2] now.``; each tag, each end tag and each atom
gets its own number (never one the sentence already contains as text). Invisible atoms (comments, scripts, ``<wbr>``)
are not sent at all and land at the end of their sentence.

A model may drop, repeat, swap or invent placeholders, so putting back never trusts it: a repeated or invented
placeholder is removed; a lost one is re-attached where it most likely belongs (a lost start tag before the last word
ahead of its end tag, a lost end tag after the first word behind its start tag, a lost pair around the element's own
text when the translation kept it verbatim — a name, a number, a file — else around the words its source span maps
onto, never empty; a lost atom after the word nearest where it maps; a swapped pair is swapped back); then the tree is
rebuilt from the original elements, each placed once, nested as in the source and never overlapping a sibling. A
translation with placeholders (or their junk) and no word, for a sentence with words, is translated once more without
the placeholders by the service (``plain_retry``); should it still reach ``render``, it is replaced by the sentence as
sent: kept untranslated, its markup exactly in place, rather than lost. So the
result is always well-formed HTML holding every original tag exactly once. The model's text is escaped.

Glossary terms (``Term``) travel as placeholders too: the model never sees them, the target term goes where its
placeholder comes back (or maps, when lost); a sentence of terms alone is not sent. ``html=False``: plain text.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transduce.engine.text import segment_around
from transduce.service.htmlnodes import Atom, Inline, Node, Term, escape_text
from transduce.service.htmlplace import Mark, Placement, SentenceSpan, flatten, word_after, word_before
from transduce.service.placeholders import PLACEHOLDER, SPACES, WORDY, Found, found_placeholders, has_word

_HUGGING = set(".,;:!?)]}…")  # punctuation that follows a word without a space
_HTML_SPACE = re.compile(r"[ \t\n\r\f]")  # the whitespace HTML collapses (not the no-break space)


class Unit(Placement):
    """The inline content of one block: its sentences for the model, and the HTML rebuilt from their translations
    (or, with ``html=False``, a plain text with glossary terms: line breaks end sentences, nothing is escaped)."""

    def __init__(self, nodes: list[Node], *, html: bool = True) -> None:
        self.nodes, self.html = nodes, html
        text: list[str] = []
        self.marks: list[Mark] = []
        flatten(nodes, text, self.marks, 0)
        self.text = "".join(text)
        self._offsets = [m.offset for m in self.marks]  # in order: marks are found by bisection, never scanned
        self._index: dict[tuple[int, str], int] = {(id(m.node), m.kind): i for i, m in enumerate(self.marks)}
        self._sentences = [self._sentence(s, e) for s, e in self._spans()]
        self.sentences = tuple(s.text for s in self._sentences if not s.fixed)

    def _spans(self) -> list[tuple[int, int]]:
        """(start, end) of every sentence: ``segment`` on each stretch between hard breaks, HTML whitespace read as
        spaces (so a line break inside a paragraph does not end a sentence), each term read as one word."""
        text = _HTML_SPACE.sub(" ", self.text) if self.html else self.text
        terms = [(m.offset, m.end) for m in self.marks if m.kind == "term"]
        cuts = sorted({m.offset for m in self.marks if isinstance(m.node, Atom) and m.node.hard_break})
        spans = []
        for lo, hi in zip([0, *cuts], [*cuts, len(self.text)], strict=True):
            seg = segment_around(text[lo:hi], [(a - lo, b - lo) for a, b in terms if lo <= a and b <= hi])
            at = lo + len(seg.leading)
            for sentence, separator in zip(seg.sentences, seg.separators, strict=True):
                spans.append((at, at + len(sentence)))
                at += len(sentence) + len(separator)
        return spans

    def _sentence(self, start: int, end: int) -> SentenceSpan:
        marks = self.marks
        inside = [  # markup strictly inside (the invisible kept out), terms from the start on
            i
            for i in range(bisect_left(self._offsets, start), bisect_left(self._offsets, end))
            if marks[i].kind == "term" or (start < marks[i].offset and not _silent(marks[i]))
        ]
        source = self.text[start:end]
        literal = {int(n) for n in PLACEHOLDER.findall(source)}
        ids: dict[int, int] = {}
        number = 0
        pieces, at = [], start
        for i in inside:
            number += 1
            while number in literal:
                number += 1
            ids[number] = i
            pieces += [self.text[at : self.marks[i].offset], f" [{number}] "]
            at = self.marks[i].end
        pieces.append(self.text[at:end])
        sent = SPACES.sub(" ", "".join(pieces)).strip(" ")
        terms = any(self.marks[i].kind == "term" for i in inside)
        return SentenceSpan(start, end, sent, ids, literal, terms and not re.search(r"\w", PLACEHOLDER.sub("", sent)))

    def render(self, translations: Sequence[str], values: Sequence[str]) -> str:
        """The unit's HTML (or text) with ``translations`` (one per sentence sent) in place of its sentences."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        sent = iter(translations)
        chosen = [(s.text, None) if s.fixed else self._or_source(s, next(sent)) for s in self._sentences]
        translations = [text for text, _ in chosen]
        target: list[str] = []
        keys: dict[int, tuple[int, int]] = {}  # mark index -> (position in the target text, order)
        size = order = 0
        gaps = [*(s.start for s in self._sentences), len(self.text)]
        ends = [0, *(s.end for s in self._sentences)]
        offsets = self._offsets
        for k, (lo, hi) in enumerate(zip(ends, gaps, strict=True)):
            # the text between sentences (and the marks there, and the invisible ones inside the sentence before)
            if k:
                prev = self._sentences[k - 1]
                for i in range(bisect_right(offsets, prev.start), bisect_left(offsets, prev.end)):
                    if _silent(self.marks[i]):
                        keys[i] = (size, order)
                        order += 1
            for i in range(bisect_left(offsets, lo), bisect_right(offsets, hi)):
                if i not in keys and self.marks[i].kind != "term":
                    keys[i] = (size + self.marks[i].offset - lo, order)
                    order += 1
            target.append(self.text[lo:hi])
            size += hi - lo
            if k < len(self._sentences):
                text, positions = self._restore(self._sentences[k], translations[k], chosen[k][1])
                rank = {mark: r for r, mark in enumerate(positions)}  # at one position: in the translation's order
                for i in sorted(positions, key=lambda mark: (positions[mark], rank[mark])):
                    keys[i] = (size + positions[i], order)
                    order += 1
                target.append(text)
                size += len(text)
        full = "".join(target)
        self._tidy(full, keys)
        escape = escape_text if self.html else str
        return _Render(full, keys, self._index, values, escape).nodes(self.nodes, (0, -1), (len(full), order))

    def _or_source(self, sentence: SentenceSpan, translation: str) -> tuple[str, Found | None]:
        """``translation``, or the sentence as sent (its placeholders exactly in place) when the model gave back
        placeholders or their junk and no word for a sentence with words: its text is kept untranslated, never lost.
        With it, the translation's placeholders when they were found on the way (None: not looked for)."""
        if not WORDY.search(PLACEHOLDER.sub("", sentence.text)):
            return translation, None
        found = found_placeholders(translation, sentence.text)
        return (translation, found) if has_word(translation, sentence.text, found) else (sentence.text, None)

    def _restore(
        self, sentence: SentenceSpan, translation: str, known: Found | None = None
    ) -> tuple[str, dict[int, int]]:
        """The translation without placeholders (``known``: its ``found_placeholders``, when they were found already),
        and where each of the sentence's marks goes in it."""
        pieces, kept, seen = [], [], set()  # the text around each placeholder; the mark each one places (None: drop)
        at = 0
        for match, found in found_placeholders(translation, sentence.text) if known is None else known:
            number = found if found is not None else next(iter(sentence.ids)) if len(sentence.ids) == 1 else 0
            if match.re is PLACEHOLDER and number not in sentence.ids and number in sentence.literal:
                continue  # the sentence's own "[n]" text
            mark = sentence.ids.get(number)
            pieces.append(translation[at : match.start()])
            kept.append(None if mark is None or mark in seen else mark)
            seen.add(mark)
            at = match.end()
        pieces.append(translation[at:])
        out = list(pieces[0])  # the text so far, one character an item: trimmed at its end in place
        positions: dict[int, int] = {}  # mark -> its offset in the text
        top = 0  # the last position given: never trimmed past
        for mark, tail in zip(kept, pieces[1:], strict=True):
            if mark is None:  # repeated or invented: drop it, and one of the spaces around it (the one before it when
                if out and out[-1].isspace() and tail[:1] in _HUGGING:  # punctuation follows: "die =15]." is "die.")
                    while len(out) > top and out[-1].isspace():
                        out.pop()
                out += tail.lstrip() if out and out[-1].isspace() else tail
                continue
            m = self.marks[mark]
            # a term is a word, never glued to another; a run kept as written ("Hi👋") only on a side where its
            # source touched a word ("Call Иван, please" is not "Иванbitte" when the comma moves)
            guard_before, guard_after = self._word_guards(m)
            word = len(out)  # (the translation so far, one character an item: a word before its blanks, if any)
            while guard_before and word and out[word - 1].isspace():
                word -= 1
            if m.offset and not self.text[m.offset - 1].isspace() and not (guard_before and word_before(out, word)):
                end = len(out)
                while end > top and out[end - 1].isspace():  # none here either
                    end -= 1
                del out[end:]
            guarded = guard_after and word_after(tail.lstrip(), 0)
            if m.end < len(self.text) and not self.text[m.end].isspace() and not guarded:
                tail = tail.lstrip()
            positions[mark] = top = len(out)
            out += (m.node.target if isinstance(m.node, Term) else "") + tail
        text = "".join(out)
        stripped = text.lstrip()
        lead = len(text) - len(stripped)
        spaced = [p for i, p in positions.items() if self._spaced_after(i)]  # an atom or term with a space after it
        if spaced and min(spaced) < lead:  # at the start: the space after it stays ("<code>x</code> und")
            lead = min(spaced)
            stripped = text[lead:]
        stripped = stripped.rstrip()
        positions = {m: min(max(p - lead, 0), len(stripped)) for m, p in positions.items()}
        return self._reattach(sentence, stripped, positions), positions

    def _spaced_after(self, i: int) -> bool:
        """Whether mark ``i`` is an atom or a term that the source follows with whitespace."""
        mark = self.marks[i]
        return mark.kind in ("atom", "term") and mark.end < len(self.text) and self.text[mark.end].isspace()

    def _tidy(self, full: str, keys: dict[int, tuple[int, int]]) -> None:
        """Tags hug their text as in the source: no space moved inside an element that had none at its edges."""
        for i, mark in enumerate(self.marks):
            if mark.kind != "open":
                continue
            close = self._index[(id(mark.node), "close")]
            (start, s_order), (end, e_order) = keys[i], keys[close]
            lo, hi = mark.offset, self.marks[close].offset
            if lo < hi and (self.text[lo].isspace() or self.text[hi - 1].isspace()):
                continue
            while start < end and full[start].isspace():
                start += 1
            while end > start and full[end - 1].isspace():
                end -= 1
            keys[i], keys[close] = (start, s_order), (end, e_order)


def _silent(mark: Mark) -> bool:
    return isinstance(mark.node, Atom) and mark.node.silent


@dataclass
class _Render:
    """Rebuilds a unit's tree over the target text: each element once, inside its parent, after its left sibling."""

    text: str
    keys: dict[int, tuple[int, int]]  # mark index -> (position in text, order)
    index: dict[tuple[int, str], int]
    values: Sequence[str]  # translated attribute values
    escape: Callable[[str], str]

    def _key(self, node: Inline | Atom, kind: str) -> tuple[int, int]:
        return self.keys[self.index[(id(node), "atom" if isinstance(node, Atom) else kind)]]

    def nodes(self, nodes: Sequence[Node], lo: tuple[int, int], hi: tuple[int, int]) -> str:
        items = sorted((n for n in nodes if isinstance(n, Inline | Atom)), key=lambda n: self._key(n, "open"))
        out, cursor = [], lo
        for node in items:
            start = min(max(self._key(node, "open"), cursor), hi)
            end = min(max(self._key(node, "close"), start), hi)
            out.append(self.escape(self.text[cursor[0] : start[0]]))
            if isinstance(node, Atom):
                out.append(node.render(self.values))
            else:
                out += [node.tag.start(self.values), self.nodes(node.children, start, end), node.tag.end()]
            cursor = end
        out.append(self.escape(self.text[cursor[0] : hi[0]]))
        return "".join(out)
