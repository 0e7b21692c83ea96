""".docx paragraphs as units and back (``docxdoc`` finds the paragraphs): a paragraph's runs as a ``Unit``, the
elements around some of them (a hyperlink, a content control, a tracked insertion: ``docxinline``) as inline elements,
those kept as they are (a tracked deletion, a simple field) as atoms; and its translation written back into its runs,
each stretch in the look most of its text had, with its own tabs and breaks."""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from transduce.service.docxinline import INSERTED, RUN_TEXT, Piece, W, pieces, run_text
from transduce.service.htmlnodes import Atom, Inline, Node, Tag
from transduce.service.htmlunits import Unit
from transduce.service.markdowndoc import unescape

_T = f"{W}t"
_TABS = (f"{W}tab", f"{W}ptab")  # a run's tabs (a w:tab under w:tabs is a tab stop, not one of these)


def _clear_text(run: Any) -> None:
    """Remove a run's text (characters, tabs, line breaks), keeping its formatting, pictures and page breaks."""
    for child in [c for c in run.iterchildren(*RUN_TEXT) if str(c)]:
        run.remove(child)


def _add_text(run: Any, text: str, tabs: Iterator[Any]) -> None:
    """``text`` into ``run``: each tab as the next of ``tabs`` (the paragraph's own, so an alignment tab, w:ptab, keeps
    its alignment and leader; a plain w:tab when none is left)."""
    for piece in re.split(r"(\t|\n)", text):
        if piece == "\t":
            tab = next(tabs, None)
            if tab is None:
                run.add_tab()
            else:
                run.append(copy.deepcopy(tab))
        elif piece == "\n":
            run.add_br()
        elif piece:
            run.add_t(piece)


_BREAK, _TAB = "<br>", "<tab>"  # a line break and a tab inside a paragraph, as Unit.render gives them back


def _lines(text: str) -> list[Node]:
    """A run's text with each line break (w:br, w:cr) and each tab (w:tab, w:ptab) as an atom that ends the sentence
    and comes back where it was (a tab had become a space: "Name:<tab>value" lost its alignment)."""
    nodes: list[Node] = []
    for k, line in enumerate(text.split("\n")):
        if k:
            nodes.append(Atom(_BREAK, hard_break=True))
        for j, cell in enumerate(line.split("\t")):
            if j:
                nodes.append(Atom(_TAB, hard_break=True))
            if cell:
                nodes.append(cell)
    return nodes


@dataclass
class _Place:
    """Where a stretch of runs is: the element holding its runs (the paragraph, a hyperlink, a control's content),
    and the inline element or atom it follows and the one it precedes there (None: none), for a run of its own."""

    holder: Any
    after: Any = None
    before: Any = None


@dataclass
class _Parts:
    """A paragraph cut for ``Paragraph``: its nodes, and where each stretch of runs is."""

    nodes: list[Node] = field(default_factory=list)
    groups: list[list[Any]] = field(default_factory=list)  # each stretch's runs: apart around inline elements, atoms
    places: list[_Place] = field(default_factory=list)  # where each stretch is
    links: list[Any] = field(default_factory=list)  # the inline elements (<l0>) and atoms (<k1>), numbered together
    first: dict[int, int] = field(default_factory=dict)  # the stretch each inline element's text starts
    past: list[int] = field(default_factory=list)  # the stretch that follows each inline element or atom
    cuts: int = 0  # stretches apart where the formatting changes
    tabs: list[Any] = field(default_factory=list)  # each tab read, in order: its element (None: a tab character)


def _is_label(head: str) -> bool:
    """Whether a paragraph's first stretch, ``head`` (its text, or None when longer than ``_HEAD``), is a label such
    as a bold "Note:" or "Step 2:": a few words ending in a colon (a few characters in a script without spaces)."""
    words = head.strip()
    wide = sum(unicodedata.east_asian_width(c) in "WF" for c in words)
    return (
        len(words) <= _LABEL_CHARS
        and words.endswith((":", "\uff1a"))
        and len(words.split()) <= _LABEL_WORDS
        and wide <= _LABEL_WIDE
    )


def _tab_elements(run: Any) -> Iterator[Any]:
    """A run's tabs in the order its text has them (``run_text``): each w:tab or w:ptab, and None for each tab
    character written inside a w:t."""
    for child in run.iterchildren(*RUN_TEXT):
        if child.tag in _TABS:
            yield child
        elif child.tag == _T:
            yield from [None] * str(child).count("\t")


def _parts(paragraph: Any, found: list[Piece], looks: dict[Any, tuple[bytes, bool]], *, cut: str) -> _Parts:
    """``paragraph``'s runs (``found``: its ``pieces``) as nodes, each element around runs an inline element and
    each kept one an atom, with a hard break (a stretch of its own) around hidden text (it went into the sentence's
    first run: a hidden one hid it all, a shown one showed the hidden words), after a label in a look of its own
    that starts the paragraph (a bold "Note:" had made the whole paragraph bold), and with ``cut`` ("all";
    "outside": not inside an element that opens within the text; "none") where the look changes after text that ends
    in punctuation (a sentence may end there: ``Paragraph`` keeps those breaks only if the sentences are the same
    with them as without). ``looks``: each run's ``_look``. Runs inside an inline element are cut as those of the
    paragraph are (all of a paragraph typed with Track Changes on is inside one insertion: read whole, its hidden
    words came back shown and its bold lost)."""
    out, tail, look = _Parts(), "", None  # the text before (its end), the formatting of the last run with text
    head: str | None = ""  # the paragraph's text while it may start with a label (None: it does not)
    label = 1  # how many stretches there are while the label's is the last (inside elements that open the text)
    hidden = None  # whether the last run with text was hidden
    nodes, holders, opened = [out.nodes], [paragraph], []  # each open inline element's children, runs' holder, number
    whole: list[bool] = []  # each open element's: opened before any text (an insertion holding the paragraph)

    def stretch(place: _Place) -> None:
        out.groups.append([])
        out.places.append(place)

    def apart() -> None:  # (inside an inline element too: its runs' holder is the innermost element's)
        nodes[-1].append(Atom(f"<s{len(out.groups)}>", hard_break=True))
        stretch(_Place(out.places[-1].holder, out.places[-1].after))

    stretch(_Place(paragraph))
    for piece in found:
        if piece.kind != "run":
            if out.places[-1].before is None:
                out.places[-1].before = piece.element
            # (a label is read on only into an element opening before any text, as an insertion holding the whole
            # paragraph does; no look across an element)
            opening = piece.kind == "open" and head is not None and not head.strip()
            head, look, n = head if opening else None, None, len(out.links)
            if piece.kind == "open":
                out.links.append(piece.element)
                out.past.append(-1)
                out.first[n] = len(out.groups)
                node = Inline(Tag(f"l{n}"))
                nodes[-1].append(node)
                nodes.append(node.children)
                holders.append(piece.holder)
                opened.append(n)
                whole.append(opening)
                stretch(_Place(piece.holder))
                label = len(out.groups)
                continue
            if piece.kind == "close":
                n = opened.pop()
                whole.pop()
                nodes.pop()
                holders.pop()
            else:  # kept as it is
                out.links.append(piece.element)
                out.past.append(-1)
                nodes[-1].append(Atom(f"<k{n}>"))
            out.past[n] = len(out.groups)
            stretch(_Place(holders[-1], piece.element))
            continue
        part, text = piece.element, piece.text
        if text.strip():
            if part not in looks:
                looks[part] = _look(part)
            mine, hides = looks[part]
            last = tail.rstrip()[-1:]
            forced = hidden is not None and hides != hidden  # (hidden text: always a stretch of its own)
            if not forced and look is not None and mine != look and head is not None:
                forced = len(out.groups) == label and _is_label(head)  # (a label: always a sentence of its own)
            if forced:
                apart()
            elif (
                cut != "none"
                and (cut == "all" or all(whole))
                and look is not None
                and mine != look
                and _punctuation(last)
            ):
                if out.cuts == _MAX_CUTS:  # (a hostile file's 50,000 runs of "A." in turns bold: read it whole)
                    return _parts(paragraph, found, looks, cut="none")
                apart()
                out.cuts += 1
            if look is not None and mine != look:
                head = None  # (only the paragraph's first look can be a label)
            look, hidden = mine, hides
        out.groups[-1].append(part)
        nodes[-1].extend(_lines(text))
        if "\t" in text:
            out.tabs += _tab_elements(part)
        tail = (tail + text)[-_TAIL:]
        if head is not None:
            head = head + text if len(head) + len(text) <= _HEAD else None
    return out


def _punctuation(char: str) -> bool:
    return bool(char) and unicodedata.category(char).startswith("P")


_TAIL = 64  # characters of a paragraph's text kept to see whether it ends in punctuation
_HEAD = 200  # characters of a paragraph's start kept to see whether it starts with a label
_LABEL_CHARS, _LABEL_WORDS, _LABEL_WIDE = 40, 5, 8  # a label's most characters, words and wide (CJK) characters
_MAX_CUTS = 100  # changes of formatting between sentences a paragraph is cut at; beyond, none


class Paragraph:
    """A .docx paragraph: its runs as a ``Unit``, the elements around some of them (a hyperlink, a content control,
    a tracked insertion) inline elements, so their text is translated inside the sentence and put back into them,
    and those kept as they are (a tracked deletion, a simple field) atoms, so they stay between the words they were
    between. Where the runs' formatting changes between two sentences (a bold "Warning." before plain text), a break
    the sentences have anyway keeps the stretches apart, so each sentence's translation goes into a run formatted as
    its source was; within a stretch, into its first run with text, in the look of most of its text (``put``). The
    sentences sent are always those the paragraph has without those breaks (one that would change them, after "Dr"
    in a hyperlink, say, drops those inside elements within the text, then all); a label that starts the paragraph
    in a look of its own ("Note:") and hidden text are always stretches of their own."""

    def __init__(self, paragraph: Any) -> None:
        self.looks: dict[Any, tuple[bytes, bool]] = {}  # each run's ``_look``
        found = pieces(paragraph)
        parts = _parts(paragraph, found, self.looks, cut="all")
        unit = Unit(parts.nodes)
        if parts.cuts:
            whole = _parts(paragraph, found, self.looks, cut="none")
            alone = Unit(whole.nodes)
            if alone.sentences != unit.sentences:  # (a cut inside a link's italic "Dr.": the others may still hold)
                outside = _parts(paragraph, found, self.looks, cut="outside")
                fewer = Unit(outside.nodes)
                parts, unit = (
                    (outside, fewer) if outside.cuts and fewer.sentences == alone.sentences else (whole, alone)
                )
        self.groups, self.places, self.first, self.past = parts.groups, parts.places, parts.first, parts.past
        self.unit, self.tabs = unit, parts.tabs
        self.fields = _field_runs(found) if has_field(paragraph) else set()

    def write(self, translations: Sequence[str]) -> None:
        from docx.oxml import OxmlElement

        texts: dict[int, str] = {}  # each stretch's text
        tabs: dict[int, list[Any]] = {}  # the paragraph's own tab elements, where each comes back
        where, next_tab = 0, iter(self.tabs)
        for token in re.split(r"(</?[kl]\d+>|<s\d+>|<br>|<tab>)", self.unit.render(translations, ())):
            tag = re.fullmatch(r"<(/?)([kls])(\d+)>", token)
            if token in (_BREAK, _TAB):  # written back as a w:br, a w:tab
                texts[where] = texts.get(where, "") + ("\n" if token == _BREAK else "\t")
                if token == _TAB:
                    tabs.setdefault(where, []).append(next(next_tab, None))
            elif tag is None:
                texts[where] = texts.get(where, "") + unescape(token, {})
            elif tag.group(2) == "s":  # a stretch of other formatting
                where = int(tag.group(3))
            elif tag.group(2) == "l" and not tag.group(1):  # into an inline element
                where = self.first[int(tag.group(3))]
            else:  # past an inline element or an atom
                where = self.past[int(tag.group(3))]
        last: dict[Any, Any] = {}  # each holder's last run so far (before any: its first)
        for runs, place in zip(self.groups, self.places, strict=True):
            if runs:
                last.setdefault(place.holder, runs[0])
        for g, (runs, place) in enumerate(zip(self.groups, self.places, strict=True)):
            text = texts.get(g, "")
            if not runs and text.strip():  # no run there: a new one, formatted as the last run before it
                run = OxmlElement("w:r")
                template = last.get(place.holder)
                if template is not None and template.rPr is not None:
                    run.append(copy.deepcopy(template.rPr))
                if place.after is not None:
                    place.after.addnext(run)
                elif place.before is not None:
                    place.before.addprevious(run)
                else:
                    place.holder.append(run)
                self.put([run], text, tabs.get(g, []))
                continue
            if runs:
                last[place.holder] = runs[-1]
            self.put(runs, text, tabs.get(g, []))

    def put(self, runs: list[Any], text: str, tabs: list[Any]) -> None:
        """``text`` into the first of ``runs`` that had text (one outside a tracked insertion, if any), the others
        emptied, in the look most of their text had: "**Save** the file before you close it." comes back plain, not
        bold (the first run's look), but where it was (a footnote mark or a picture after the text stays after it).
        A field's run keeps its own look."""
        texts = [(run, run_text(run)) for run in runs]
        # (not a run of an insertion inside a word, where there is another: all the text would read as inserted)
        # (one with text to show: a run of a space or a break has no look of its own, and the text took the first's)
        # (nor a field's result where another run shows text: Word fills it again, and the sentence would go with it)
        visible = [run for run, t in texts if t.strip()]
        visible = [run for run in visible if run not in self.fields] or visible
        own = next((run for run in visible if run.getparent().tag not in INSERTED), None)
        shown = visible[0] if visible else next((run for run, t in texts if t), None)
        first = own if own is not None else shown if shown is not None else runs[0] if runs else None
        weights: dict[bytes, int] = {}
        model: dict[bytes, Any] = {}  # a run in each look
        for run, t in texts:
            if t.strip():
                if run not in self.looks:
                    self.looks[run] = _look(run)
                look = self.looks[run][0]
                weights[look] = weights.get(look, 0) + len(t.strip())
                model.setdefault(look, run)
        for run in runs:
            _clear_text(run)
        if first is None:
            return
        most = max(weights, key=weights.__getitem__, default=None)  # (a tie: the first look)
        mine = self.looks[first][0] if first in self.looks else None
        if most is not None and mine is not None and weights[most] > weights.get(mine, 0) and first not in self.fields:
            properties = model[most].find(f"{W}rPr")
            for old in first.findall(f"{W}rPr"):
                first.remove(old)
            if properties is not None:
                first.insert(0, copy.deepcopy(properties))
        _add_text(first, text, iter(tabs))


def _field_runs(found: list[Piece]) -> set[Any]:
    """The runs of a paragraph (``found``: its ``pieces``) that are a field's code or result (w:fldChar begin ...
    end), in one pass."""
    out, depth = set(), 0
    for run in (piece.element for piece in found if piece.kind == "run"):
        kinds = [mark.get(f"{W}fldCharType") for mark in run.iterchildren(f"{W}fldChar")]
        if depth or kinds:
            out.add(run)
        depth = max(0, depth + kinds.count("begin") - kinds.count("end"))
    return out


_INVISIBLE = frozenset(f"{W}{tag}" for tag in ("lang", "noProof", "szCs", "bCs", "iCs", "rPrChange", "webHidden"))
_HINT = f"{W}hint"


def _look(run: Any) -> tuple[bytes, bool]:
    """A run's formatting as it shows: its w:rPr without what does not (the spelling language, proofing marks,
    complex-script sizes, a font hint, tracked changes of formatting: Word splits runs by them, and "The" in en-US
    next to " part is" in en-GB were two looks; b"" for none), and whether its text is hidden (w:vanish)."""
    properties = run.find(f"{W}rPr")
    if properties is None:
        return b"", False
    vanish = properties.find(f"{W}vanish")
    hidden = vanish is not None and vanish.get(f"{W}val", "true").lower() not in ("0", "false", "off")
    shown = []
    for child in properties:
        if child.tag in _INVISIBLE:
            continue
        if child.get(_HINT) is not None:
            child = copy.copy(child)
            del child.attrib[_HINT]
            if not child.attrib and child.tag == f"{W}rFonts":
                continue
        shown.append(etree.tostring(child))
    return b"".join(shown), hidden


_FIELDS = (f"{W}fldChar", f"{W}fldSimple", f"{W}instrText")


def has_field(paragraph: Any) -> bool:
    """Whether a paragraph holds a field (a page number, a date): Word fills its result again when it shows a header
    or footer, so one translated as text came back as "Seite 1 von 313" ("Page 1 of 3", its results emptied)."""
    return next(paragraph.iter(*_FIELDS), None) is not None
