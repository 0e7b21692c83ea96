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

import itertools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from transduce.engine.text import segment
from transduce.service.htmlnodes import Atom, Inline, Node, Term, escape_text

_MARK = re.compile(r"\[\s*(\d{1,6})\s*\]")  # a placeholder as the model may give it back: [3], [ 3 ]
PLACEHOLDER = _MARK  # (public) what stands for markup or a term in a sentence sent: validation counts them
# ... or, having learned placeholders from software messages, as a printf-style specifier: %3, %3$s, »%s«, with
# runs of "$1" it sometimes adds; read as placeholders only when the sentence sent has no "%" of its own
_PRINTF_MARK = re.compile(r"[»«„“\"]?%(?:(\d{1,6})(?:\$\d*[sd]?)*|[sd](?![^\W\d_]))[«»“\"]?")
_DOLLAR_RUN = re.compile(r"(?:\$\d*[sd]?)+")  # its "$1$1$s" runs: dropped when the sentence sent has no "$"
# ... or with its "[" turned into "=" ("=1]", "=15]", "=1"), or with a bracket doubled ("[1]]"): read so only in a
# sentence sent with placeholders and no "=" (no bracket) of its own outside them
_EQUALS_MARK = re.compile(r"=(\d{1,6})\]?")
_EQUALS_RUN = re.compile(r"=(?!\d)(?:[ \t]*=(?!\d))+")  # "= =": a wiki heading's marks, learned in training: junk
_BRACKET = re.compile(r"[\[\]]")
_BRACKET_JUNK = re.compile(r"\[[^\w\[\]\s]{0,2}\s*\d{1,6}\s*[^\w\[\]\s]{0,2}\]?|\[[A-Z][A-Z_]{1,15}\d{0,3}\]?")
_HUGGING = set(".,;:!?)]}…")  # punctuation that follows a word without a space
_HTML_SPACE = re.compile(r"[ \t\n\r\f]")  # the whitespace HTML collapses (not the no-break space)
_SPACES = re.compile(r"[ \t\n\r\f]+")
_NON_SPACE = re.compile(r"\S+")
_WORD = re.compile(r"\w+(?:[-'’.]\w+)*")  # a word of a translation, for placing what the model lost
_ENDS_SENTENCE = re.compile(r"[\s.!?…]")  # what could end a sentence inside a term: hidden from segmentation
_WORDY = re.compile(r"\w")


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


# placeholders of a translation, each with its number (``_placeholders``)
Found = list[tuple[re.Match[str], int | None]]


def _placeholders(translation: str, sent: str) -> Found:
    """The placeholders of a translation in order, each with its number: ``[n]``; printf-style ones when ``sent``
    (what the model was given) has no "%" (``%s``: None, the sentence's only placeholder if it has one); "$1$s" runs
    when it has no "$" either (0: invented, dropped)."""
    found: list[tuple[re.Match[str], int | None]] = [(m, int(m.group(1))) for m in _MARK.finditer(translation)]
    if "%" in translation and "%" not in sent:
        found += [(m, int(m.group(1)) if m.group(1) else None) for m in _PRINTF_MARK.finditer(translation)]
        if "$" not in sent:
            found += _outside(found, ((m, 0) for m in _DOLLAR_RUN.finditer(translation)))
    own = _MARK.sub("", sent)  # the sentence sent without its placeholders
    if own != sent and "=" in translation and "=" not in own:
        found += _outside(found, ((m, int(m.group(1))) for m in _EQUALS_MARK.finditer(translation)))
        found += _outside(found, ((m, 0) for m in _EQUALS_RUN.finditer(translation)))
    if own != sent and "[" not in own and "]" not in own:  # the sentence sent has no bracket of its own, so
        # placeholders of the kinds the model met in training ("[;0]", "[:15", "[URL]", "[PERSON1") are junk (dropped)
        found += _outside(found, ((m, 0) for m in _BRACKET_JUNK.finditer(translation)))
        # and so is a bracket touching a placeholder
        ends = {m.end() for m, _ in found} | {m.start() for m, _ in found}
        touching = (m for m in _BRACKET.finditer(translation) if m.start() in ends or m.end() in ends)
        found += _outside(found, ((m, 0) for m in touching))
    found.sort(key=lambda item: item[0].start())
    return found


def _has_word(translation: str, sent: str, found: Found | None = None) -> bool:
    """Whether ``translation`` of ``sent`` has a word outside its placeholders and their junk (``found``, when they
    are known: ``_placeholders``)."""
    at, words = 0, []
    for match, _ in _placeholders(translation, sent) if found is None else found:
        words.append(translation[at : match.start()])
        at = match.end()
    return bool(_WORDY.search("".join([*words, translation[at:]])))


def plain_retry(sent: str, translation: str) -> str | None:
    """What to translate again when the model gave back placeholders (or their junk) and no word for ``sent``, a
    sentence with placeholders and words: ``sent`` without its placeholders, whose translation then places the
    markup as for lost placeholders; None when ``translation`` will do."""
    if not _MARK.search(sent) or _has_word(translation, sent):
        return None
    plain = _SPACES.sub(" ", _MARK.sub(" ", sent)).strip()
    return plain if _WORDY.search(plain) else None


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
        self._offsets = [m.offset for m in self.marks]  # in order: marks are found by bisection, never scanned
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
        marks = self.marks
        inside = [  # markup strictly inside (the invisible kept out), terms from the start on
            i
            for i in range(bisect_left(self._offsets, start), bisect_left(self._offsets, end))
            if marks[i].kind == "term" or (start < marks[i].offset and not _silent(marks[i]))
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

    def _or_source(self, sentence: _Sentence, translation: str) -> tuple[str, Found | None]:
        """``translation``, or the sentence as sent (its placeholders exactly in place) when the model gave back
        placeholders or their junk and no word for a sentence with words: its text is kept untranslated, never lost.
        With it, the translation's placeholders when they were found on the way (None: not looked for)."""
        if not _WORDY.search(_MARK.sub("", sentence.text)):
            return translation, None
        found = _placeholders(translation, sentence.text)
        return (translation, found) if _has_word(translation, sentence.text, found) else (sentence.text, None)

    def _restore(self, sentence: _Sentence, translation: str, known: Found | None = None) -> tuple[str, dict[int, int]]:
        """The translation without placeholders (``known``: its ``_placeholders``, when they were found already),
        and where each of the sentence's marks goes in it."""
        pieces, kept, seen = [], [], set()  # the text around each placeholder; the mark each one places (None: drop)
        at = 0
        for match, found in _placeholders(translation, sentence.text) if known is None else known:
            number = found if found is not None else next(iter(sentence.ids)) if len(sentence.ids) == 1 else 0
            if match.re is _MARK and number not in sentence.ids and number in sentence.literal:
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
            term = m.kind == "term"  # a word: never glued to another word
            last = next((c for c in reversed(out) if not c.isspace()), "") if term else ""
            if m.offset and not self.text[m.offset - 1].isspace() and not (term and _WORDY.match(last)):
                end = len(out)
                while end > top and out[end - 1].isspace():  # none here either
                    end -= 1
                del out[end:]
            if m.end < len(self.text) and not self.text[m.end].isspace() and not (term and _WORDY.match(tail.lstrip())):
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

    def _reattach(self, sentence: _Sentence, text: str, positions: dict[int, int]) -> str:
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

    def _fill_empty(self, sentence: _Sentence, ids: set[int], text: str, positions: dict[int, int]) -> set[int]:
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
            if lo > hi or not _WORDY.search(_own_text(mark)) or _WORDY.search(text[lo:hi]):
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

    def _scale(self, sentence: _Sentence, text: str, offset: int) -> float:
        """Where ``offset`` of the source sentence falls in ``text``, in proportion to the lengths."""
        return (offset - sentence.start) / max(sentence.end - sentence.start, 1) * len(text)

    def _pair_span(
        self,
        sentence: _Sentence,
        text: str,
        lower: str,
        words: list[tuple[int, int]],
        middles: list[float],
        mark: _Mark,
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

    def _put(self, lost: list[int], sentence: _Sentence, text: str, positions: dict[int, int]) -> str:
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
            spaced = isinstance(mark.node, Term) or self.text[mark.offset - 1].isspace()
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


def _own_text(mark: _Mark) -> str:
    """The text of ``mark``'s element as the target sees it, whitespace collapsed."""
    return _SPACES.sub(" ", _target_text(getattr(mark.node, "children", ()))).strip()


def _find(text: str, lower: str, words: str) -> int:
    """Where ``words`` first occur in ``text`` (``lower``: lower-cased), ignoring case where that keeps offsets; -1
    when absent or empty."""
    if not words:
        return -1
    at = text.find(words)
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
