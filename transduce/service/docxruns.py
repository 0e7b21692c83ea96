""".docx paragraphs as units and back (``docxdoc`` finds the paragraphs): a paragraph's runs and hyperlinks as a
``Unit`` (a hyperlink is an inline element), and its translation written back into its runs, each stretch in the look
most of its text had, with its own tabs and breaks."""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from transduce.service.htmlnodes import Atom, Inline, Node, Tag
from transduce.service.htmlunits import Unit
from transduce.service.markdowndoc import unescape

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
P, R, HYPERLINK = f"{W}p", f"{W}r", f"{W}hyperlink"
_RUN_TEXT = tuple(f"{W}{tag}" for tag in ("br", "cr", "noBreakHyphen", "ptab", "t", "tab"))  # python-docx's CT_R.text
_T = f"{W}t"
_TABS = (f"{W}tab", f"{W}ptab")  # a run's tabs (a w:tab under w:tabs is a tab stop, not one of these)
SHOWN = (f"{W}t", f"{W}noBreakHyphen")  # where a run's text can be other than blank


def _run_text(run: Any) -> str:
    """A run's (CT_R) text as python-docx reads it (tabs and line breaks as characters), in one pass."""
    return "".join(str(e) for e in run.iterchildren(*_RUN_TEXT))


def part_runs(part: Any) -> Iterator[Any]:
    """The runs of a paragraph's part: a run itself, or a hyperlink's runs."""
    return iter((part,)) if part.tag == R else part.iterchildren(R)


def part_text(part: Any) -> str:
    """The text of a run, a hyperlink or a paragraph (its runs and hyperlinks), as python-docx reads it."""
    parts = part.iterchildren(R, HYPERLINK) if part.tag == P else (part,)
    return "".join(_run_text(run) for p in parts for run in part_runs(p))


def _clear_text(run: Any) -> None:
    """Remove a run's text (characters, tabs, line breaks), keeping its formatting, pictures and page breaks."""
    for child in [c for c in run.iterchildren(*_RUN_TEXT) if str(c)]:
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
class _Parts:
    """A paragraph cut for ``Paragraph``: its nodes, and where each stretch of runs is."""

    nodes: list[Node] = field(default_factory=list)
    groups: list[list[Any]] = field(default_factory=lambda: [[]])  # each stretch's runs: around hyperlinks, apart
    after: list[Any] = field(default_factory=lambda: [None])  # the hyperlink each stretch follows (None: none)
    links: list[Any] = field(default_factory=list)  # the hyperlinks (CT_Hyperlink)
    past: list[int] = field(default_factory=list)  # the stretch that follows each hyperlink
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
    """A run's tabs in the order its text has them (``_run_text``): each w:tab or w:ptab, and None for each tab
    character written inside a w:t."""
    for child in run.iterchildren(*_RUN_TEXT):
        if child.tag in _TABS:
            yield child
        elif child.tag == _T:
            yield from [None] * str(child).count("\t")


def _parts(paragraph: Any, looks: dict[Any, tuple[bytes, bool]], *, cut: bool) -> _Parts:
    """``paragraph``'s runs and hyperlinks as nodes, with a hard break (a stretch of its own) around hidden text (it
    went into the sentence's first run: a hidden one hid it all, a shown one showed the hidden words), after a label
    in a look of its own that starts the paragraph (a bold "Note:" had made the whole paragraph bold), and with
    ``cut`` where the look changes after text that ends in punctuation (a sentence may end there: ``Paragraph``
    keeps those breaks only if the sentences are the same with them as without). ``looks``: each run's ``_look``."""
    out, tail, look = _Parts(), "", None  # the text before (its end), the formatting of the last run with text
    head: str | None = ""  # the paragraph's text while it may start with a label (None: it does not)
    hidden = None  # whether the last run with text was hidden

    def apart() -> None:
        out.nodes.append(Atom(f"<s{len(out.groups)}>", hard_break=True))
        out.groups.append([])
        out.after.append(out.after[-1])

    for part in paragraph.iterchildren(R, HYPERLINK):
        text = part_text(part)
        if part.tag == HYPERLINK:
            head = None  # (no label before a hyperlink)
            if text.strip():
                out.tabs += [t for run in part.iterchildren(R) for t in _tab_elements(run)]
            n = len(out.links)
            out.links.append(part)
            out.past.append(len(out.groups))
            out.groups.append([])
            out.after.append(part)
            out.nodes.append(Inline(Tag(f"l{n}"), _lines(text)) if text.strip() else Atom(f"<k{n}>"))
            tail, look = (tail + text)[-_TAIL:], None
            continue
        if text.strip():
            if part not in looks:
                looks[part] = _look(part)
            mine, hides = looks[part]
            last = tail.rstrip()[-1:]
            forced = hidden is not None and hides != hidden  # (hidden text: always a stretch of its own)
            if not forced and look is not None and mine != look and head is not None:
                forced = len(out.groups) == 1 and _is_label(head)  # (a label: always a sentence of its own)
            if forced:
                apart()
            elif cut and look is not None and mine != look and last and unicodedata.category(last).startswith("P"):
                if out.cuts == _MAX_CUTS:  # (a hostile file's 50,000 runs of "A." in turns bold: read it whole)
                    return _parts(paragraph, looks, cut=False)
                apart()
                out.cuts += 1
            if look is not None and mine != look:
                head = None  # (only the paragraph's first look can be a label)
            look, hidden = mine, hides
        out.groups[-1].append(part)
        out.nodes += _lines(text)
        if "\t" in text:
            out.tabs += _tab_elements(part)
        tail = (tail + text)[-_TAIL:]
        if head is not None:
            head = head + text if len(head) + len(text) <= _HEAD else None
    return out


_TAIL = 64  # characters of a paragraph's text kept to see whether it ends in punctuation
_HEAD = 200  # characters of a paragraph's start kept to see whether it starts with a label
_LABEL_CHARS, _LABEL_WORDS, _LABEL_WIDE = 40, 5, 8  # a label's most characters, words and wide (CJK) characters
_MAX_CUTS = 100  # changes of formatting between sentences a paragraph is cut at; beyond, none


class Paragraph:
    """A .docx paragraph: its runs and hyperlinks as a ``Unit`` (a hyperlink is an inline element, so its text is
    translated inside the sentence and put back into the hyperlink). Where the runs' formatting changes between two
    sentences (a bold "Warning." before plain text), a break the sentences have anyway keeps the stretches apart, so
    each sentence's translation goes into a run formatted as its source was; within a stretch, into its first run
    with text, in the look of most of its text (``put``). The sentences sent are always those the paragraph has
    without those breaks (one that would change them, after "Dr" in a hyperlink, say, drops them all); a label that
    starts the paragraph in a look of its own ("Note:") and hidden text are always stretches of their own."""

    def __init__(self, paragraph: Any) -> None:
        self.looks: dict[Any, tuple[bytes, bool]] = {}  # each run's ``_look``
        parts = _parts(paragraph, self.looks, cut=True)
        unit = Unit(parts.nodes)
        if parts.cuts:
            whole = _parts(paragraph, self.looks, cut=False)
            alone = Unit(whole.nodes)
            if alone.sentences != unit.sentences:
                parts, unit = whole, alone
        self.groups, self.after, self.links, self.past = parts.groups, parts.after, parts.links, parts.past
        self.unit, self.tabs = unit, parts.tabs
        self.fields = _field_runs(paragraph) if has_field(paragraph) else set()

    def write(self, translations: Sequence[str]) -> None:
        from docx.oxml import OxmlElement

        texts: dict[tuple[str, int], str] = {}
        tabs: dict[tuple[str, int], list[Any]] = {}  # the paragraph's own tab elements, where each comes back
        where, next_tab = ("g", 0), iter(self.tabs)
        for token in re.split(r"(</?[kl]\d+>|<s\d+>|<br>|<tab>)", self.unit.render(translations, ())):
            tag = re.fullmatch(r"<(/?)([kls])(\d+)>", token)
            if token in (_BREAK, _TAB):  # written back as a w:br, a w:tab
                texts[where] = texts.get(where, "") + ("\n" if token == _BREAK else "\t")
                if token == _TAB:
                    tabs.setdefault(where, []).append(next(next_tab, None))
            elif tag is None:
                texts[where] = texts.get(where, "") + unescape(token, {})
            elif tag.group(2) == "s":  # a stretch of other formatting
                where = ("g", int(tag.group(3)))
            elif tag.group(2) == "l" and not tag.group(1):
                where = ("l", int(tag.group(3)))
            else:  # past a hyperlink
                where = ("g", self.past[int(tag.group(3))])
        for n, link in enumerate(self.links):
            if part_text(link).strip():
                self.put(list(link.iterchildren(R)), texts.get(("l", n), ""), tabs.get(("l", n), []))
        template = next((r for rs in self.groups for r in rs), None)  # the last run so far (before any: the first)
        for g, runs in enumerate(self.groups):
            text = texts.get(("g", g), "")
            if not runs and text.strip():  # no run there: a new one, formatted as the last run before it
                run = OxmlElement("w:r")
                if template is not None and template.rPr is not None:
                    run.append(copy.deepcopy(template.rPr))
                (self.after[g].addnext if self.after[g] is not None else self.links[0].addprevious)(run)
                self.put([run], text, tabs.get(("g", g), []))
                continue
            template = runs[-1] if runs else template
            self.put(runs, text, tabs.get(("g", g), []))

    def put(self, runs: list[Any], text: str, tabs: list[Any]) -> None:
        """``text`` into the first of ``runs`` that had text, the others emptied, in the look most of their text had:
        "**Save** the file before you close it." comes back plain, not bold (the first run's look), but where it
        was (a footnote mark or a picture after the text stays after it). A field's run keeps its own look."""
        texts = [(run, _run_text(run)) for run in runs]
        first = next((run for run, t in texts if t), runs[0] if runs else None)
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


def _field_runs(paragraph: Any) -> set[Any]:
    """The runs of ``paragraph`` that are a field's code or result (w:fldChar begin ... end), in one pass."""
    out, depth = set(), 0
    for part in paragraph.iterchildren(R, HYPERLINK):
        for run in part_runs(part):
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
