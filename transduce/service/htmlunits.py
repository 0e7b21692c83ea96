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
rebuilt from the original elements, each placed once, nested as in the source and never overlapping a sibling. So the
result is always well-formed HTML holding every original tag exactly once. The model's text is escaped.

Glossary terms (``Term``) travel as placeholders too: the model never sees them, the target term goes where its
placeholder comes back (or maps, when lost); a sentence of terms alone is not sent. ``html=False``: plain text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from transduce.engine.text import segment

_MARK = re.compile(r"\[\s*(\d{1,6})\s*\]")  # a placeholder as the model may give it back: [3], [ 3 ]
_HTML_SPACE = re.compile(r"[ \t\n\r\f]")  # the whitespace HTML collapses (not the no-break space)
_SPACES = re.compile(r"[ \t\n\r\f]+")
_LAST_WORD = re.compile(r"(\S+?)[.,;:!?…)\]\"'»”’]*\s*$")
_FIRST_WORD = re.compile(r"\s*\S+")
_WORD = re.compile(r"\w+(?:[-'’.]\w+)*")  # a word of a translation, for placing what the model lost
_ENDS_SENTENCE = re.compile(r"[\s.!?…]")  # what could end a sentence inside a term: hidden from segmentation
_WORDY = re.compile(r"\w")


def escape_text(text: str) -> str:
    """Text as HTML serializes it: ``&``, ``<``, ``>`` and the no-break space escaped."""
    return text.replace("&", "&amp;").replace("\u00a0", "&nbsp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attribute(value: str) -> str:
    """An attribute value for inside double quotes."""
    return escape_text(value).replace('"', "&quot;")


@dataclass(frozen=True)
class AttrSlot:
    """A translated attribute value (``title``, ``alt``, ...): the index of its translation among the document's."""

    index: int


@dataclass(frozen=True)
class Tag:
    """An element's start and end tags; attribute values are kept as sent, or translated (``AttrSlot``)."""

    name: str
    attrs: tuple[tuple[str, str | AttrSlot], ...] = ()
    void: bool = False  # no end tag (<img>, <br>, ...)

    def start(self, values: Sequence[str]) -> str:
        """The start tag, with translated attributes taken from ``values``."""
        parts = [self.name]
        for name, value in self.attrs:
            text = values[value.index] if isinstance(value, AttrSlot) else value
            parts.append(f'{name}="{escape_attribute(text)}"')
        return "<" + " ".join(parts) + ">"

    def end(self) -> str:
        """The end tag (nothing for a void element)."""
        return "" if self.void else f"</{self.name}>"


@dataclass(eq=False)
class Atom:
    """Markup kept as it is inside a sentence: verbatim HTML, or a void element's tag (its attributes translated)."""

    markup: str | Tag
    silent: bool = False  # invisible (comment, script, <wbr>): not sent to the model
    hard_break: bool = False  # <br>: ends the sentence

    def render(self, values: Sequence[str]) -> str:
        return self.markup.start(values) if isinstance(self.markup, Tag) else self.markup


@dataclass(eq=False)
class Inline:
    """An inline element translated as part of its sentence."""

    tag: Tag
    children: list[Node] = field(default_factory=list)


@dataclass(eq=False)
class Term:
    """A glossary term found in the text: one placeholder for the model, ``target`` in the translation (the term to
    use, or the source term as found to keep it)."""

    source: str
    target: str


Node = Inline | Atom | Term | str


@dataclass
class _Mark:
    """A start tag, end tag, atom or term at ``offset`` of the unit's text."""

    kind: Literal["open", "close", "atom", "term"]
    node: Inline | Atom | Term
    offset: int

    @property
    def end(self) -> int:
        """Where the text the mark covers ends (a term's source text; markup covers none)."""
        return self.offset + len(self.node.source) if isinstance(self.node, Term) else self.offset


@dataclass
class _Sentence:
    """A sentence span of the unit's text, what is sent for it, and the placeholders it holds."""

    start: int
    end: int
    text: str  # sent to the model
    ids: dict[int, int]  # placeholder number -> mark index
    literal: set[int]  # numbers written as [n] in the sentence itself (text, not placeholders)
    fixed: bool = False  # only terms to put in (and markup, punctuation): not sent, its own translation


def _flatten(nodes: Sequence[Node], text: list[str], marks: list[_Mark], size: int) -> int:
    """Append the text of ``nodes`` to ``text`` and their markup to ``marks``; returns the new text length."""
    for node in nodes:
        if isinstance(node, str):
            text.append(node)
            size += len(node)
        elif isinstance(node, Atom):
            marks.append(_Mark("atom", node, size))
        elif isinstance(node, Term):
            marks.append(_Mark("term", node, size))
            text.append(node.source)
            size += len(node.source)
        else:
            marks.append(_Mark("open", node, size))
            size = _flatten(node.children, text, marks, size)
            marks.append(_Mark("close", node, size))
    return size


def plain_text(nodes: Sequence[Node]) -> str:
    """The text of ``nodes`` (atoms left out)."""
    text: list[str] = []
    _flatten(nodes, text, [], 0)
    return "".join(text)


def _target_text(nodes: Sequence[Node]) -> str:
    """The text of ``nodes`` as the translation should hold it verbatim: terms as their targets, atoms left out."""
    return "".join(
        n if isinstance(n, str) else n.target if isinstance(n, Term) else _target_text(getattr(n, "children", ()))
        for n in nodes
    )


class Unit:
    """The inline content of one block: its sentences for the model, and the HTML rebuilt from their translations
    (or, with ``html=False``, a plain text with glossary terms: line breaks end sentences, nothing is escaped)."""

    def __init__(self, nodes: list[Node], *, html: bool = True) -> None:
        self.nodes, self.html = nodes, html
        text: list[str] = []
        self.marks: list[_Mark] = []
        _flatten(nodes, text, self.marks, 0)
        self.text = "".join(text)
        self._index: dict[tuple[int, str], int] = {(id(m.node), m.kind): i for i, m in enumerate(self.marks)}
        self._sentences = [self._sentence(s, e) for s, e in self._spans()]
        self.sentences = tuple(s.text for s in self._sentences if not s.fixed)

    def _spans(self) -> list[tuple[int, int]]:
        """(start, end) of every sentence: ``segment`` on each stretch between hard breaks, HTML whitespace read as
        spaces (so a line break inside a paragraph does not end a sentence), each term read as one word."""
        view = list(_HTML_SPACE.sub(" ", self.text) if self.html else self.text)
        for m in self.marks:
            if m.kind == "term":
                view[m.offset : m.end] = _ENDS_SENTENCE.sub("_", self.text[m.offset : m.end])
        cuts = sorted({m.offset for m in self.marks if isinstance(m.node, Atom) and m.node.hard_break})
        spans = []
        for lo, hi in zip([0, *cuts], [*cuts, len(self.text)], strict=True):
            seg = segment("".join(view[lo:hi]))
            at = lo + len(seg.leading)
            for sentence, separator in zip(seg.sentences, seg.separators, strict=True):
                spans.append((at, at + len(sentence)))
                at += len(sentence) + len(separator)
        return spans

    def _sentence(self, start: int, end: int) -> _Sentence:
        inside = [
            i
            for i, m in enumerate(self.marks)
            if (start < m.offset < end and not _silent(m)) or (m.kind == "term" and start <= m.offset < end)
        ]
        source = self.text[start:end]
        literal = {int(n) for n in _MARK.findall(source)}
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
        sent = _SPACES.sub(" ", "".join(pieces)).strip(" ")
        terms = any(self.marks[i].kind == "term" for i in inside)
        return _Sentence(start, end, sent, ids, literal, terms and not re.search(r"\w", _MARK.sub("", sent)))

    def render(self, translations: Sequence[str], values: Sequence[str]) -> str:
        """The unit's HTML (or text) with ``translations`` (one per sentence sent) in place of its sentences."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        sent = iter(translations)
        translations = [s.text if s.fixed else next(sent) for s in self._sentences]
        target: list[str] = []
        keys: dict[int, tuple[int, int]] = {}  # mark index -> (position in the target text, order)
        size = order = 0
        gaps = [*(s.start for s in self._sentences), len(self.text)]
        ends = [0, *(s.end for s in self._sentences)]
        by_offset = sorted(range(len(self.marks)), key=lambda i: (self.marks[i].offset, i))
        for k, (lo, hi) in enumerate(zip(ends, gaps, strict=True)):
            # the text between sentences (and the marks there, and the invisible ones inside the sentence before)
            hidden = []
            if k:
                prev = self._sentences[k - 1]
                hidden = [
                    i for i in by_offset if prev.start < self.marks[i].offset < prev.end and _silent(self.marks[i])
                ]
            for i in hidden:
                keys[i] = (size, order)
                order += 1
            for i in by_offset:
                if lo <= self.marks[i].offset <= hi and i not in keys and self.marks[i].kind != "term":
                    keys[i] = (size + self.marks[i].offset - lo, order)
                    order += 1
            target.append(self.text[lo:hi])
            size += hi - lo
            if k < len(self._sentences):
                text, positions = self._restore(self._sentences[k], translations[k])
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

    def _restore(self, sentence: _Sentence, translation: str) -> tuple[str, dict[int, int]]:
        """The translation without placeholders, and where each of the sentence's marks goes in it."""
        pieces, kept = [], []  # the text around each placeholder; the mark each one places (None: drop it)
        at = 0
        for match in _MARK.finditer(translation):
            number = int(match.group(1))
            if number not in sentence.ids and number in sentence.literal:
                continue  # the sentence's own "[n]" text
            mark = sentence.ids.get(number)
            pieces.append(translation[at : match.start()])
            kept.append(None if mark is None or mark in kept else mark)
            at = match.end()
        pieces.append(translation[at:])
        text = pieces[0]
        positions: dict[int, int] = {}  # mark -> its offset in text
        for mark, tail in zip(kept, pieces[1:], strict=True):
            if mark is None:  # repeated or invented: drop it, and one of the spaces around it
                text += tail.lstrip() if text[-1:].isspace() else tail
                continue
            m = self.marks[mark]
            term = m.kind == "term"  # a word: never glued to another word
            if m.offset and not self.text[m.offset - 1].isspace() and not (term and _WORDY.match(text.rstrip()[-1:])):
                text = text[: max(len(text.rstrip()), max(positions.values(), default=0))]  # none here either
            if m.end < len(self.text) and not self.text[m.end].isspace() and not (term and _WORDY.match(tail.lstrip())):
                tail = tail.lstrip()
            positions[mark] = len(text)
            text += (m.node.target if isinstance(m.node, Term) else "") + tail
        stripped = text.lstrip()
        lead = len(text) - len(stripped)
        stripped = stripped.rstrip()
        positions = {m: min(max(p - lead, 0), len(stripped)) for m, p in positions.items()}
        return self._reattach(sentence, stripped, positions), positions

    def _reattach(self, sentence: _Sentence, text: str, positions: dict[int, int]) -> str:
        """Place the sentence's marks the model lost (the text, with the lost terms put in, is returned), and swap
        back an end tag it put before its start tag."""
        ids = set(sentence.ids.values())
        lost = [i for i in sorted(ids) if i not in positions]
        for i in lost:  # atoms and terms first: putting them in may add text
            if self.marks[i].kind in ("atom", "term"):
                text = self._put(i, sentence, text, positions)
        for i in lost:
            mark = self.marks[i]
            if mark.kind == "open":
                close = self._index[(id(mark.node), "close")]
                own = _SPACES.sub(" ", _target_text(getattr(mark.node, "children", ()))).strip()
                if close in ids and close not in positions:  # both lost: around its own text if the model kept it
                    at = _find(text, own)
                    span = (at, at + len(own)) if at >= 0 else self._mapped(sentence, text, mark, close)
                    positions[i], positions[close] = span
                else:  # before the last word ahead of its end tag (or of the sentence's end)
                    limit = positions.get(close, len(text))
                    found = _LAST_WORD.search(text[:limit])
                    positions[i] = found.start() if found else limit
        for i in lost:
            mark = self.marks[i]
            if mark.kind == "close" and i not in positions:  # after the first word behind its start tag
                start = positions.get(self._index[(id(mark.node), "open")], 0)
                found = _FIRST_WORD.match(text, start)
                positions[i] = found.end() if found else len(text)
        terms = [(p, p + len(n.target)) for j, p in positions.items() if isinstance(n := self.marks[j].node, Term)]
        for i, (start, end) in ((i, t) for i in lost if self.marks[i].kind in ("open", "close") for t in terms):
            if start < positions[i] < end:  # a tag put back never splits a term's words
                positions[i] = end if self.marks[i].kind == "close" else start
        swaps = {}
        for i in ids - set(lost):
            mark = self.marks[i]
            close = self._index[(id(mark.node), "close")] if mark.kind == "open" else -1
            if close in ids and close not in lost and positions[close] < positions[i]:
                swaps[i], swaps[close] = close, i
        if swaps:  # each takes the other's place (and order)
            placed = list(positions.items())
            positions.clear()
            positions.update((swaps.get(i, i), pos) for i, pos in placed)
        return text

    def _scale(self, sentence: _Sentence, text: str, offset: int) -> float:
        """Where ``offset`` of the source sentence falls in ``text``, in proportion to the lengths."""
        return (offset - sentence.start) / max(sentence.end - sentence.start, 1) * len(text)

    def _mapped(self, sentence: _Sentence, text: str, mark: _Mark, close: int) -> tuple[int, int]:
        """Where a lost pair goes when its own text is not in the translation: around the words whose middle falls
        where its source span maps (the word nearest to it when none does), so it never comes back empty."""
        lo, hi = self._scale(sentence, text, mark.offset), self._scale(sentence, text, self.marks[close].offset)
        words = [(w.start(), w.end()) for w in _WORD.finditer(text)]
        inside = [w for w in words if lo <= (w[0] + w[1]) / 2 < hi]
        inside = inside or sorted(words, key=lambda w: abs(w[0] + w[1] - lo - hi))[:1]
        return (inside[0][0], inside[-1][1]) if inside else (len(text), len(text))

    def _put(self, i: int, sentence: _Sentence, text: str, positions: dict[int, int]) -> str:
        """Put a lost atom or term where its source offset maps: after the nearest word's end (before the final
        punctuation), with a space when the source had one before it; at the start when nothing came before it."""
        mark = self.marks[i]
        piece = mark.node.target if isinstance(mark.node, Term) else ""
        spaced = bool(piece) or self.text[mark.offset - 1].isspace()  # (a lost atom is never first in the unit)
        ends = [w.end() for w in _WORD.finditer(text)]
        if not ends or not re.search(r"\w", self.text[sentence.start : mark.offset]):
            at, before, after = 0, "", " " if isinstance(mark.node, Term) and text[:1].strip() else ""
        else:
            x = self._scale(sentence, text, mark.offset)
            at, before, after = min(ends, key=lambda e: abs(e - x)), " " if spaced else "", ""
        insert = before + piece + after
        for j, p in positions.items():
            if p > at:
                positions[j] = p + len(insert)
        positions[i] = at + len(before)
        return text[:at] + insert + text[at:]

    def _tidy(self, full: str, keys: dict[int, tuple[int, int]]) -> None:
        """Tags hug their text as in the source: no space moved inside an element that had none at its edges."""
        for i, mark in enumerate(self.marks):
            if mark.kind != "open":
                continue
            close = self._index[(id(mark.node), "close")]
            (start, s_order), (end, e_order) = keys[i], keys[close]
            inner = self.text[mark.offset : self.marks[close].offset]
            if inner[:1].isspace() or inner[-1:].isspace():
                continue
            while start < end and full[start].isspace():
                start += 1
            while end > start and full[end - 1].isspace():
                end -= 1
            keys[i], keys[close] = (start, s_order), (end, e_order)


def _find(text: str, words: str) -> int:
    """Where ``words`` first occur in ``text``, ignoring case where that keeps offsets; -1 when absent or empty."""
    if not words:
        return -1
    at = text.find(words)
    lower = text.lower()
    if at < 0 and len(lower) == len(text) and len(words.lower()) == len(words):
        at = lower.find(words.lower())
    return at


def _silent(mark: _Mark) -> bool:
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
