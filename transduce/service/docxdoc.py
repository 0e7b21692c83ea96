""".docx for POST /translate_file (``documents.read_document``): each paragraph of the body, of its tables (nested ones
too) and of its content controls, in document order, then of its headers, footers, footnotes and endnotes; not those
of text boxes or comments, nor those Word fills itself (``_left_alone``), nor a header's or footer's holding a field
(``_has_field``). The text of the runs between hyperlinks goes into the first of them (which keeps its formatting;
``_Paragraph`` keeps sentences apart where the formatting changes between them), a hyperlink's text into the
hyperlink, placed as in HTML; a line break inside a paragraph ends a sentence and stays where it was.

The XML is walked with lxml's ``iterchildren``/``iter``, never with python-docx's XPath unions (``w:r | w:hyperlink``,
``w:t | w:br | ...``) or its table model: libxml2 merges a union's node sets in time quadratic in a parent's children
(30,000 pieces of text in one run: 11 s to read, 12 s to write back), and ``row.cells`` walks every vertically merged
cell up to its first (500 merged rows: 8.8 s; about 1,000 a RecursionError) and repeats a spanning cell once per grid
column it spans (``gridSpan="300000"``: 13 s).
"""

from __future__ import annotations

import copy
import io
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from transduce.service.documents import (
    DOCX_TYPE,
    MARKUP_ALLOWANCE,
    Document,
    plain_text,
    split_counts,
    too_many_chars,
)
from transduce.service.docxzip import check_zip, docx_problem
from transduce.service.errors import ApiError
from transduce.service.htmlnodes import Atom, Inline, Node, Tag
from transduce.service.htmlunits import Unit
from transduce.service.markdowndoc import unescape

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_P, _R, _HYPERLINK = f"{_W}p", f"{_W}r", f"{_W}hyperlink"
_RUN_TEXT = tuple(f"{_W}{tag}" for tag in ("br", "cr", "noBreakHyphen", "ptab", "t", "tab"))  # python-docx's CT_R.text
_TABS = (f"{_W}tab", f"{_W}ptab")  # a run's tabs (a w:tab under w:tabs is a tab stop, not one of these)
_SHOWN = (f"{_W}t", f"{_W}noBreakHyphen")  # where a run's text can be other than blank


def _run_text(run: Any) -> str:
    """A run's (CT_R) text as python-docx reads it (tabs and line breaks as characters), in one pass."""
    return "".join(str(e) for e in run.iterchildren(*_RUN_TEXT))


def _runs(part: Any) -> Iterator[Any]:
    """The runs of a paragraph's part: a run itself, or a hyperlink's runs."""
    return iter((part,)) if part.tag == _R else part.iterchildren(_R)


def _text(part: Any) -> str:
    """The text of a run, a hyperlink or a paragraph (its runs and hyperlinks), as python-docx reads it."""
    parts = part.iterchildren(_R, _HYPERLINK) if part.tag == _P else (part,)
    return "".join(_run_text(run) for p in parts for run in _runs(p))


def _visible(paragraph: Any) -> bool:
    """Whether a paragraph may have text: the many empty ones are passed over without reading their text."""
    return any(
        e.text is None or e.text.strip()
        for part in paragraph.iterchildren(_R, _HYPERLINK)
        for run in _runs(part)
        for e in run.iterchildren(*_SHOWN)
    )


def _paragraphs(body: Any) -> Iterator[Any]:
    """Every paragraph (CT_P) of the body in document order, those in tables and content controls included, but not
    those ``_left_alone``."""
    for paragraph in body.iter(_P):
        if not any(map(_left_alone, paragraph.iterancestors())):
            yield paragraph


_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_GENERATED = ("table of contents", "bibliograph")  # building blocks (w:docPartGallery) Word fills from fields
_FILLED = (f"{_W}dataBinding", f"{_W}showingPlcHdr")  # a control Word fills from data, or showing its placeholder


def _left_alone(holder: Any) -> bool:
    """Whether a paragraph inside ``holder`` is left as it is: inside another paragraph's run (a text box: its text
    is in the file twice, as a shape and as its fallback), an older reader's fallback (mc:Fallback), the cell a cell
    above merges into (w:vMerge, not shown), or a content control that Word fills: a table of contents or
    bibliography (field results: as text, their page numbers would be the model's), one bound to data (filled
    again from it), one showing its placeholder text."""
    tag = holder.tag
    if tag in (_P, _MC_FALLBACK):
        return True
    if tag == f"{_W}tc":
        merge = holder.find(f"{_W}tcPr/{_W}vMerge")
        return merge is not None and merge.get(f"{_W}val", "continue") == "continue"
    if tag == f"{_W}sdt":
        properties = holder.find(f"{_W}sdtPr")
        if properties is None:
            return False
        gallery = properties.find(f"{_W}docPartObj/{_W}docPartGallery")
        kind = (gallery.get(f"{_W}val") or "").lower() if gallery is not None else ""
        return any(properties.find(t) is not None for t in _FILLED) or any(g in kind for g in _GENERATED)
    return False


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
    """A paragraph cut for ``_Paragraph``: its nodes, and where each stretch of runs is."""

    nodes: list[Node] = field(default_factory=list)
    groups: list[list[Any]] = field(default_factory=lambda: [[]])  # each stretch's runs: around hyperlinks, apart
    after: list[Any] = field(default_factory=lambda: [None])  # the hyperlink each stretch follows (None: none)
    links: list[Any] = field(default_factory=list)  # the hyperlinks (CT_Hyperlink)
    past: list[int] = field(default_factory=list)  # the stretch that follows each hyperlink
    cuts: int = 0  # stretches apart where the formatting changes


def _is_label(head: str) -> bool:
    """Whether a paragraph's first stretch (its first ``_LABEL_CHARS`` + 1 characters at most) is a label such as a
    bold "Note:" or "Step 2:" (a few words ending in a colon)."""
    words = head.strip()
    return len(words) <= _LABEL_CHARS and words.endswith((":", "\uff1a")) and len(words.split()) <= _LABEL_WORDS


def _parts(paragraph: Any, *, cut: bool) -> _Parts:
    """``paragraph``'s runs and hyperlinks as nodes: a hard break after a label in a look of its own that starts the
    paragraph (a bold "Note:" had made the whole paragraph bold), and with ``cut`` one where the formatting changes
    after text that ends in punctuation (a sentence may end there: ``_Paragraph`` keeps those breaks only if the
    sentences are the same with them as without)."""
    out, tail, look = _Parts(), "", None  # the text before (its end), the formatting of the last run with text
    head = ""  # the paragraph's first characters, while it may start with a label
    for part in paragraph.iterchildren(_R, _HYPERLINK):
        text = _text(part)
        if part.tag == _HYPERLINK:
            head = "-" * (_LABEL_CHARS + 1)  # (no label before a hyperlink)
            n = len(out.links)
            out.links.append(part)
            out.past.append(len(out.groups))
            out.groups.append([])
            out.after.append(part)
            out.nodes.append(Inline(Tag(f"l{n}"), _lines(text)) if text.strip() else Atom(f"<k{n}>"))
            tail, look = (tail + text)[-_TAIL:], None
            continue
        if text.strip():
            mine = _look(part)
            last = tail.rstrip()[-1:]
            if look is not None and mine != look and len(out.groups) == 1 and _is_label(head):
                out.nodes.append(Atom(f"<s{len(out.groups)}>", hard_break=True))  # (a sentence of its own)
                out.groups.append([])
                out.after.append(out.after[-1])
            elif cut and look is not None and mine != look and last and unicodedata.category(last).startswith("P"):
                if out.cuts == _MAX_CUTS:  # (a hostile file's 50,000 runs of "A." in turns bold: read it whole)
                    return _parts(paragraph, cut=False)
                out.nodes.append(Atom(f"<s{len(out.groups)}>", hard_break=True))
                out.groups.append([])
                out.after.append(out.after[-1])
                out.cuts += 1
            look = mine
        out.groups[-1].append(part)
        out.nodes += _lines(text)
        tail = (tail + text)[-_TAIL:]
        head = (head + text)[: _LABEL_CHARS + 1]
    return out


_TAIL = 64  # characters of a paragraph's text kept to see whether it ends in punctuation
_LABEL_CHARS, _LABEL_WORDS = 40, 5  # a label's most characters and words
_MAX_CUTS = 100  # changes of formatting between sentences a paragraph is cut at; beyond, none


class _Paragraph:
    """A .docx paragraph: its runs and hyperlinks as a ``Unit`` (a hyperlink is an inline element, so its text is
    translated inside the sentence and put back into the hyperlink). Where the runs' formatting changes between two
    sentences (a bold "Warning." before plain text), a break the sentences have anyway keeps the stretches apart, so
    each sentence's translation goes into a run formatted as its source was; within a stretch, into its first run
    in the look of most of its text (``put``). The sentences sent are always those the paragraph has without the
    breaks (one that would change them, after "Dr" in a hyperlink, say, drops them all), but for a label that starts
    the paragraph in a look of its own ("Note:"), which is a sentence of its own."""

    def __init__(self, paragraph: Any) -> None:
        parts = _parts(paragraph, cut=True)
        unit = Unit(parts.nodes)
        if parts.cuts:
            whole = _parts(paragraph, cut=False)
            alone = Unit(whole.nodes)
            if alone.sentences != unit.sentences:
                parts, unit = whole, alone
        self.groups, self.after, self.links, self.past = parts.groups, parts.after, parts.links, parts.past
        self.unit = unit
        runs = (run for part in paragraph.iterchildren(_R, _HYPERLINK) for run in _runs(part))
        self.tabs = [t for run in runs for t in run.iterchildren(*_TABS)]  # in document order, as they come back
        self.passed_over = _in_fields_or_hidden(paragraph)

    def write(self, translations: Sequence[str]) -> None:
        from docx.oxml import OxmlElement

        texts: dict[tuple[str, int], str] = {}
        tabs: dict[tuple[str, int], list[Any]] = {}  # the paragraph's own tabs, where each comes back
        where, next_tab = ("g", 0), iter(self.tabs)
        for token in re.split(r"(</?[kl]\d+>|<s\d+>|<br>|<tab>)", self.unit.render(translations, ())):
            tag = re.fullmatch(r"<(/?)([kls])(\d+)>", token)
            if token in (_BREAK, _TAB):  # written back as a w:br, a w:tab
                texts[where] = texts.get(where, "") + ("\n" if token == _BREAK else "\t")
                tab = next(next_tab, None) if token == _TAB else None
                if tab is not None:
                    tabs.setdefault(where, []).append(tab)
            elif tag is None:
                texts[where] = texts.get(where, "") + unescape(token, {})
            elif tag.group(2) == "s":  # a stretch of other formatting
                where = ("g", int(tag.group(3)))
            elif tag.group(2) == "l" and not tag.group(1):
                where = ("l", int(tag.group(3)))
            else:  # past a hyperlink
                where = ("g", self.past[int(tag.group(3))])
        for n, link in enumerate(self.links):
            if _text(link).strip():
                self.put(list(link.iterchildren(_R)), texts.get(("l", n), ""), tabs.get(("l", n), []))
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
        """``text`` into one of ``runs`` (keeping its formatting), the others emptied: the first that had text in the
        look most of their text had ("Click **Save** to continue." comes back plain, not bold: "Save" was the first
        run's look), passing over a field's runs (Word fills their text again) and hidden ones where others had
        text."""
        texts = [(run, _run_text(run)) for run in runs]
        shown = [(run, t) for run, t in texts if t and run not in self.passed_over] or [(r, t) for r, t in texts if t]
        weights: dict[bytes, int] = {}
        for run, t in shown:
            weights[_look(run)] = weights.get(_look(run), 0) + len(t.strip())
        most = max(weights.values(), default=0)
        first = next((run for run, t in shown if weights[_look(run)] == most), runs[0] if runs else None)
        for run in runs:
            _clear_text(run)
        if first is not None:
            _add_text(first, text, iter(tabs))


def _in_fields_or_hidden(paragraph: Any) -> set[Any]:
    """The runs of ``paragraph`` that belong to a field (its code, its result: Word fills the result again) or are
    hidden (w:vanish)."""
    out, depth = set(), 0
    for part in paragraph.iterchildren(_R, _HYPERLINK):
        for run in _runs(part):
            kinds = [c.get(f"{_W}fldCharType") for c in run.iterchildren(f"{_W}fldChar")]
            hidden = run.find(f"{_W}rPr/{_W}vanish")
            if depth or kinds or (hidden is not None and hidden.get(f"{_W}val", "true") not in ("0", "false", "off")):
                out.add(run)
            depth = max(0, depth + kinds.count("begin") - kinds.count("end"))
    return out


def _look(run: Any) -> bytes:
    """A run's formatting (its w:rPr as written; b"" for none)."""
    properties = run.find(f"{_W}rPr")
    return b"" if properties is None else etree.tostring(properties)


_HEADERS_FOOTERS = (f"{_W}hdr", f"{_W}ftr")
_NOTES = {  # parts python-docx reads as bytes alone, by content type: their root element
    "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml": f"{_W}footnotes",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.endnotes+xml": f"{_W}endnotes",
}


def _stories(name: str, doc: Any) -> tuple[list[tuple[Any, bool]], list[tuple[Any, Any]]]:
    """Where a document's text is (Word's "stories"): the body, then each header and footer, footnotes and endnotes
    (each part once, however many sections share it), each with whether it is a header or footer; and the parts
    python-docx keeps as bytes (footnotes, endnotes), each with the tree read from it, to write back. One of those
    that is not XML is a 400, as a broken body is (Word does not open such a file either)."""
    from docx.oxml.parser import parse_xml

    stories, blobs = [(doc.element.body, False)], []
    for part in doc.part.package.iter_parts():
        element = getattr(part, "element", None)
        if element is not None and element.tag in _HEADERS_FOOTERS:
            stories.append((element, True))
        elif element is not None and element.tag in _NOTES.values():  # (a python-docx that reads them)
            stories.append((element, False))
        elif part.content_type in _NOTES:
            try:
                root = parse_xml(part.blob)
            except etree.XMLSyntaxError as exc:  # (its notes had been left untranslated without a word)
                problem = f"its part {part.partname} is not well-formed XML ({exc.msg})"
                raise ApiError(400, f"{name} is not a readable .docx file: {problem}") from None
            if root.tag == _NOTES[part.content_type]:
                stories.append((root, False))
                blobs.append((part, root))
    return stories, blobs


_FIELDS = (f"{_W}fldChar", f"{_W}fldSimple", f"{_W}instrText")


def _has_field(paragraph: Any) -> bool:
    """Whether a paragraph holds a field (a page number, a date): Word fills its result again when it shows a header
    or footer, so one translated as text came back as "Seite 1 von 313" ("Page 1 of 3", its results emptied)."""
    return next(paragraph.iter(*_FIELDS), None) is not None


def read_docx(name: str, data: bytes, max_chars: int, max_bytes: int) -> Document:
    """A .docx's paragraphs as units (with limits: ``docxzip.check_zip`` first, then the characters of text)."""
    import docx  # python-docx

    if max_bytes:
        check_zip(name, data, max_bytes)
    try:
        doc = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - a broken zip or XML raises many types: all mean "not a .docx"
        raise ApiError(400, f"{name} is not a readable .docx file: {docx_problem(exc)}") from None
    found, size = [], 0
    stories, blobs = _stories(name, doc)
    for paragraph in (p for story, margin in stories for p in _paragraphs(story) if not (margin and _has_field(p))):
        text = _text(paragraph) if _visible(paragraph) else ""
        if text.strip():
            found.append(paragraph)
            size += len(text)
    if max_chars and size > MARKUP_ALLOWANCE * max_chars:  # before its sentences are cut
        raise too_many_chars(name, size, max_chars)
    paragraphs = [_Paragraph(paragraph) for paragraph in found]

    def rebuild(translations: list[str]) -> bytes:
        for paragraph, mine in zip(
            paragraphs, split_counts([len(p.unit.sentences) for p in paragraphs], translations), strict=True
        ):
            paragraph.write(mine)
        for part, root in blobs:  # parts python-docx keeps as bytes: written back from the tree read here
            part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
        out = io.BytesIO()
        doc.save(out)
        return out.getvalue()

    units = [s for p in paragraphs for s in p.unit.sentences]
    return Document(units, rebuild, DOCX_TYPE, plain_text(units))
