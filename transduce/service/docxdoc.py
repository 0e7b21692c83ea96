""".docx for POST /translate_file (``documents.read_document``): each paragraph of the body, of its tables (nested ones
too) and of its content controls, in document order, then of its headers, footers, footnotes and endnotes; not those
of text boxes or comments, nor those Word fills itself (``_left_alone``), nor a header's or footer's holding a field
(``has_field``). The text of the runs between inline elements (a hyperlink, a content control, a tracked insertion:
``docxinline``) goes into the first of them, in the look most of it has (``Paragraph`` keeps sentences apart where
the formatting changes between them, and hidden text apart), an inline element's text into it (its runs cut as
those outside are), placed as in HTML; what is kept as it is (a tracked deletion, a simple field) stays between the
words it was between; a line break inside a paragraph ends a sentence and stays where it was.

The XML is walked with lxml's ``iterchildren``/``iter``, never with python-docx's XPath unions (``w:r | w:hyperlink``,
``w:t | w:br | ...``) or its table model: libxml2 merges a union's node sets in time quadratic in a parent's children
(30,000 pieces of text in one run: 11 s to read, 12 s to write back), and ``row.cells`` walks every vertically merged
cell up to its first (500 merged rows: 8.8 s; about 1,000 a RecursionError) and repeats a spanning cell once per grid
column it spans (``gridSpan="300000"``: 13 s).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
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
from transduce.service.docxinline import SHOWN, P, W, filled_control, paragraph_text, read_runs
from transduce.service.docxruns import Paragraph, has_field
from transduce.service.docxzip import check_zip, docx_problem
from transduce.service.errors import ApiError


def _visible(paragraph: Any) -> bool:
    """Whether a paragraph may have text: the many empty ones are passed over without reading their text."""
    return any(e.text is None or e.text.strip() for run in read_runs(paragraph) for e in run.iterchildren(*SHOWN))


def _paragraphs(body: Any) -> Iterator[Any]:
    """Every paragraph (CT_P) of the body in document order, those in tables and content controls included, but not
    those ``_left_alone``."""
    for paragraph in body.iter(P):
        if not any(map(_left_alone, paragraph.iterancestors())):
            yield paragraph


_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def _left_alone(holder: Any) -> bool:
    """Whether a paragraph inside ``holder`` is left as it is: inside another paragraph's run (a text box: its text
    is in the file twice, as a shape and as its fallback), an older reader's fallback (mc:Fallback), the cell a cell
    above merges into (w:vMerge, not shown), or a content control that Word fills (``filled_control``)."""
    tag = holder.tag
    if tag in (P, _MC_FALLBACK):
        return True
    if tag == f"{W}tc":
        merge = holder.find(f"{W}tcPr/{W}vMerge")
        return merge is not None and merge.get(f"{W}val", "continue") == "continue"
    return tag == f"{W}sdt" and filled_control(holder)


_HEADERS_FOOTERS = (f"{W}hdr", f"{W}ftr")
_NOTES = {  # parts python-docx reads as bytes alone, by content type: their root element
    "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml": f"{W}footnotes",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.endnotes+xml": f"{W}endnotes",
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
            if root.tag != _NOTES[part.content_type]:  # (its notes were skipped without a word)
                kind = _NOTES[part.content_type].removeprefix(W)
                problem = f"its {kind} part {part.partname} holds <{etree.QName(root).localname}>, not <w:{kind}>"
                raise ApiError(400, f"{name} is not a readable .docx file: {problem}")
            stories.append((root, False))
            blobs.append((part, root))
    return stories, blobs


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
    for paragraph in (p for story, margin in stories for p in _paragraphs(story) if not (margin and has_field(p))):
        text = paragraph_text(paragraph) if _visible(paragraph) else ""
        if text.strip():
            found.append(paragraph)
            size += len(text)
    if max_chars and size > MARKUP_ALLOWANCE * max_chars:  # before its sentences are cut
        raise too_many_chars(name, size, max_chars)
    paragraphs = [Paragraph(paragraph) for paragraph in found]

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
