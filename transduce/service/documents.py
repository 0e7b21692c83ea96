"""Documents for POST /translate_file: a file's translatable units out, the file rebuilt around their translations.

- .txt translates line by line (blank lines and each line's indentation kept).
- .md keeps its structure (``markdowndoc``): code, HTML blocks and link destinations are never translated; headings,
  list items, quotes and table cells keep their markers; a paragraph is translated as one text.
- .html/.htm goes through ``htmldoc`` as ``format: "html"`` does (tags, attributes, scripts kept).
- .docx translates each paragraph of the body and of its tables: the text of the runs between hyperlinks goes into
  the first of those runs (which keeps its formatting), a hyperlink's text into the hyperlink, placed as in HTML; a
  line break inside a paragraph ends a sentence and stays where it was.

Before anything is parsed, a text file of over ``MARKUP_ALLOWANCE`` times the character limit is refused, and so is a
.docx that would unpack to over ``DOCX_INFLATION`` times the byte limit, or that holds over ``MAX_DOCX_PARTS`` files
(a zip bomb): 413s.
"""

from __future__ import annotations

import codecs
import contextlib
import copy
import io
import re
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any

from lxml import etree

from transduce.service.errors import ApiError
from transduce.service.htmldoc import parse_html
from transduce.service.htmlnodes import Atom, Inline, Node, Tag
from transduce.service.htmlunits import Unit
from transduce.service.markdowndoc import Markdown, MarkdownText, unescape

TEXT_TYPES = {".txt": "text/plain; charset=utf-8", ".md": "text/markdown; charset=utf-8"}
HTML_TYPES = {".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8"}
DOCX = ".docx"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MEDIA_TYPES = {**TEXT_TYPES, **HTML_TYPES, DOCX: DOCX_TYPE}  # what a translated file is served as
MARKUP_ALLOWANCE = 2  # a text file may hold this many times max_file_chars before it is parsed (markup, indentation)
DOCX_INFLATION = 20  # a .docx may unpack to this many times max_file_bytes
MAX_DOCX_PARTS = 5_000  # files in a .docx's zip (a real document holds tens, a few hundred with many pictures)
MAX_DOCX_ELEMENTS = 200_000  # XML elements in a .docx (a 30-page document holds tens of thousands)


@dataclass
class Document:
    """The units to translate and how to put the file back together from their translations."""

    units: list[str]
    rebuild: Callable[[list[str]], bytes]
    media_type: str
    text: str  # the file's text without markup: what language detection reads


def supported_types() -> list[str]:
    """The file name endings POST /translate_file accepts."""
    return list(MEDIA_TYPES)


def too_many_chars(name: str, chars: int, limit: int, *, raw: bool = False) -> ApiError:
    """The 413 for a file with more than ``limit`` (max_file_chars) characters of text; ``raw``: counted before
    parsing, markup and whitespace included, against ``MARKUP_ALLOWANCE`` times the limit."""
    if raw:
        return ApiError(
            413,
            f"{name} has {chars} characters, markup and whitespace included, over {MARKUP_ALLOWANCE} times the limit "
            f"of {limit} characters of text (max_file_chars): split it",
        )
    return ApiError(413, f"{name} has {chars} characters of text, over the limit of {limit} (max_file_chars): split it")


def read_document(name: str, data: bytes, *, max_chars: int = 0, max_bytes: int = 0) -> Document:
    """Parse an uploaded file by its name's ending; a type we cannot read, or a broken file, is a 400. With limits
    (max_file_chars, max_file_bytes; 0: none), a text of over ``MARKUP_ALLOWANCE * max_chars`` characters, or a
    .docx unpacking to over ``DOCX_INFLATION * max_bytes`` bytes, is a 413 before it is parsed."""
    suffix = PurePath(name).suffix.lower()
    if suffix == DOCX:
        return _docx(name, data, max_chars, max_bytes)
    if suffix not in MEDIA_TYPES:
        raise ApiError(
            400, f"files of type {suffix or '(none)'!r} are not supported: send {', '.join(supported_types())}"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ApiError(400, f"{name} is not UTF-8 text: save it as UTF-8 and send it again") from None
    if max_chars and len(text) > MARKUP_ALLOWANCE * max_chars:
        raise too_many_chars(name, len(text), max_chars, raw=True)
    document = _text(text) if suffix == ".txt" else _markdown(text) if suffix == ".md" else _html(name, text)
    if data.startswith(codecs.BOM_UTF8):  # the translation starts with the byte order mark the file had
        rebuild = document.rebuild
        return replace(document, rebuild=lambda translations: codecs.BOM_UTF8 + rebuild(translations))
    return document


def _split(counts: Sequence[int], translations: Sequence[str]) -> list[Sequence[str]]:
    """``translations`` cut into consecutive slices of ``counts`` items."""
    out, at = [], 0
    for n in counts:
        out.append(translations[at : at + n])
        at += n
    return out


def _plain(units: Sequence[str]) -> str:
    """The units without their placeholders: the text language detection reads."""
    return " ".join(re.sub(r"\[\d+\]", "", unit) for unit in units)


def _text(text: str) -> Document:
    lines = text.split("\n")
    kept = [line.strip() for line in lines]

    def rebuild(translations: list[str]) -> bytes:
        it = iter(translations)
        out = [line if not body else line.replace(body, next(it), 1) for line, body in zip(lines, kept, strict=True)]
        return "\n".join(out).encode()

    units = [body for body in kept if body]
    return Document(units, rebuild, TEXT_TYPES[".txt"], "\n".join(units))


def _html(name: str, text: str) -> Document:
    try:
        item = parse_html(text, utf8=True)  # written as UTF-8, so declared so
    except ApiError as exc:  # too deeply nested: said of the file, not of q
        raise ApiError(exc.status, f"{name} {exc.message.removeprefix('q ')}") from None
    return Document(list(item.sentences), lambda t: item.rejoin(t).encode(), HTML_TYPES[".html"], item.text)


# --- Markdown: rows of kept text and translatable texts (markdowndoc) ---------------------------------------------


def _markdown(text: str) -> Document:
    newline = _line_end(text)
    rows = Markdown(text.replace("\r\n", "\n").replace("\r", "\n")).read()
    blocks = [part for row in rows for part in row if isinstance(part, MarkdownText)]

    def rebuild(translations: list[str]) -> bytes:
        mine = dict(zip(map(id, blocks), _split([len(b.unit.sentences) for b in blocks], translations), strict=True))
        out = ["".join(p if isinstance(p, str) else p.render(mine[id(p)]) for p in row) for row in rows]
        return "\n".join(out).replace("\n", newline).encode()

    units = [s for b in blocks for s in b.unit.sentences]
    return Document(units, rebuild, TEXT_TYPES[".md"], _plain(units))


def _line_end(text: str) -> str:
    """The line end most of ``text``'s lines have: CRLF, LF, or a lone CR (classic Mac OS, which CommonMark reads as a
    line end too); the rebuilt file has it on every line (one CRLF among LF lines made them all CRLF)."""
    crlf = text.count("\r\n")
    counts = {"\r\n": crlf, "\n": text.count("\n") - crlf, "\r": text.count("\r") - crlf}
    return max(counts, key=lambda end: counts[end]) if any(counts.values()) else "\n"


# --- .docx -----------------------------------------------------------------------------------------------------------


def _clear_text(run: Any) -> None:
    """Remove a run's text (characters, tabs, line breaks), keeping its formatting, pictures and page breaks."""
    for child in run.xpath("w:br | w:cr | w:noBreakHyphen | w:ptab | w:t | w:tab"):
        if str(child):
            run.remove(child)


def _add_text(run: Any, text: str) -> None:
    for piece in re.split(r"(\t|\n)", text):
        if piece == "\t":
            run.add_tab()
        elif piece == "\n":
            run.add_br()
        elif piece:
            run.add_t(piece)


_BREAK = "<br>"  # a line break inside a paragraph, as Unit.render gives it back


def _lines(text: str) -> list[Node]:
    """A run's text with each line break (w:br, w:cr) as an atom that ends the sentence and comes back as a break."""
    nodes: list[Node] = []
    for k, line in enumerate(text.split("\n")):
        if k:
            nodes.append(Atom(_BREAK, hard_break=True))
        if line:
            nodes.append(line)
    return nodes


class _Paragraph:
    """A .docx paragraph: its runs and hyperlinks as a ``Unit`` (a hyperlink is an inline element, so its text is
    translated inside the sentence and put back into the hyperlink)."""

    def __init__(self, paragraph: Any) -> None:
        from docx.text.hyperlink import Hyperlink

        self.groups: list[list[Any]] = [[]]  # the runs (CT_R) before, between and after the hyperlinks
        self.links: list[Any] = []  # the hyperlinks (CT_Hyperlink)
        nodes: list[Node] = []
        for part in paragraph.iter_inner_content():
            if isinstance(part, Hyperlink):
                text, n = part.text, len(self.links)
                self.links.append(part._element)
                self.groups.append([])
                nodes.append(Inline(Tag(f"l{n}"), _lines(text)) if text.strip() else Atom(f"<k{n}>"))
            else:
                self.groups[-1].append(part.element)
                nodes += _lines(part.text)
        self.unit = Unit(nodes)

    def write(self, translations: Sequence[str]) -> None:
        from docx.oxml import OxmlElement

        texts: dict[tuple[str, int], str] = {}
        where, group = ("g", 0), 0
        for token in re.split(r"(</?[kl]\d+>|<br>)", self.unit.render(translations, ())):
            tag = re.fullmatch(r"<(/?)([kl])(\d+)>", token)
            if token == _BREAK:  # written back as a w:br
                texts[where] = texts.get(where, "") + "\n"
            elif tag is None:
                texts[where] = texts.get(where, "") + unescape(token, {})
            elif tag.group(2) == "l" and not tag.group(1):
                where = ("l", int(tag.group(3)))
            else:  # past a hyperlink
                group += 1
                where = ("g", group)
        for n, link in enumerate(self.links):
            if link.text.strip():
                self.put(link.r_lst, texts.get(("l", n), ""))
        for g, runs in enumerate(self.groups):
            text = texts.get(("g", g), "")
            if not runs and text.strip():  # no run there: a new one, formatted as the paragraph's first run
                run = OxmlElement("w:r")
                template = next((r for rs in self.groups for r in rs), None)
                if template is not None and template.rPr is not None:
                    run.append(copy.deepcopy(template.rPr))
                (self.links[g - 1].addnext if g else self.links[0].addprevious)(run)
                runs = [run]
            self.put(runs, text)

    @staticmethod
    def put(runs: list[Any], text: str) -> None:
        """``text`` into the first of ``runs`` that had text (keeping its formatting); the others emptied."""
        first = next((r for r in runs if r.text), runs[0] if runs else None)
        for run in runs:
            _clear_text(run)
        if first is not None:
            _add_text(first, text)


def _check_zip(name: str, data: bytes, max_bytes: int) -> None:
    """Refuse (413) a .docx that holds over ``MAX_DOCX_PARTS`` files, would unpack to over ``DOCX_INFLATION *
    max_bytes`` bytes (its zip directory says: the zip reader never gives more than a file declares), or whose XML
    has over ``MAX_DOCX_ELEMENTS`` elements (counted as it streams, stopping there): python-docx unpacks and parses
    all of it, and its time grows with the elements. A broken zip is a 400."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = archive.infolist()
            if len(files) > MAX_DOCX_PARTS:
                raise ApiError(413, f"{name} holds {len(files)} files, over the limit of {MAX_DOCX_PARTS} in a .docx")
            size, limit = sum(info.file_size for info in files), DOCX_INFLATION * max_bytes
            if size > limit:
                raise ApiError(
                    413,
                    f"{name} unpacks to {size} bytes, over the limit of {limit} ({DOCX_INFLATION} x max_file_bytes)",
                )
            # every part python-docx may parse, whatever its name (it follows the package's relationships, which
            # may point at word/document.bin; a binary part stops the parser at its first bytes), but not images:
            # python-docx keeps those as bytes, and an SVG picture is XML of its own
            counted = [info for info in files if not info.is_dir() and info.filename != CONTENT_TYPES]
            types = next((info for info in files if info.filename == CONTENT_TYPES), None)
            budget = _Budget(name)
            images = _image_parts(archive, types, budget) if types is not None else set()
            for info in counted:
                if info.filename not in images:
                    _count_elements(archive, info, budget)
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken zip raises several types
        raise ApiError(400, f"{name} is not a readable .docx file: {_docx_problem(exc)}") from None


CONTENT_TYPES = "[Content_Types].xml"  # an OPC package's part types: by name (Override) or by ending (Default)


class _Budget:
    """The XML elements a .docx may hold (``MAX_DOCX_ELEMENTS``), spent as its parts are read; 413 past it."""

    def __init__(self, name: str) -> None:
        self.name, self.left = name, MAX_DOCX_ELEMENTS

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ApiError(
                413, f"{self.name} has over {MAX_DOCX_ELEMENTS} XML elements, the limit for a .docx: split it"
            )


def _count_elements(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget) -> list[Any]:
    """Stream one part's XML, spending an element of ``budget`` for each; returns its elements with attributes that
    say a part type (Default and Override, for the content types); nothing for what is not XML."""
    typed: list[Any] = []
    with archive.open(info) as part, contextlib.suppress(etree.XMLSyntaxError):  # (python-docx judges the XML)
        for _, element in etree.iterparse(part, events=("end",), resolve_entities=False, no_network=True):
            budget.spend()
            if element.get("ContentType") is not None and len(typed) < MAX_DOCX_PARTS:
                typed.append((element.get("Extension"), element.get("PartName"), element.get("ContentType")))
    return typed


def _image_parts(archive: zipfile.ZipFile, types: zipfile.ZipInfo, budget: _Budget) -> set[str]:
    """The parts ``[Content_Types].xml`` types as images (image/*), by name or by their ending."""
    entries = _count_elements(archive, types, budget)
    by_ending = {ext.lower(): kind for ext, _, kind in entries if ext is not None}
    by_name = {name.lstrip("/"): kind for _, name, kind in entries if name is not None}
    names = [info.filename for info in archive.infolist()]
    return {
        n
        for n in names
        if by_name.get(n, by_ending.get(PurePath(n).suffix.lstrip(".").lower(), "")).startswith("image/")
    }


def _docx_problem(exc: Exception) -> str:
    """What is wrong with a file that does not open as a .docx, in words a user can act on."""
    if isinstance(exc, zipfile.BadZipFile):
        return "it is not a zip archive, which every .docx is"
    if isinstance(exc, KeyError):  # a part the package lists or python-docx needs is not in the archive
        return "a part every Word document has (such as word/document.xml) is missing from it"
    if isinstance(exc, etree.XMLSyntaxError):
        return "the XML inside it is damaged"
    return "it does not hold a Word document (save it again from a word processor as .docx)"


_VISIBLE = etree.XPath(  # where a paragraph's (CT_P) text can be other than blank, as python-docx reads it
    "(w:r | w:hyperlink/w:r)/*[self::w:t or self::w:noBreakHyphen]",
    namespaces={"w": "http://schemas.openxmlformats.org/wordprocessingml/2006/main"},
)


def _visible(paragraph: Any) -> bool:
    """Whether a paragraph may have text: the many empty ones are passed over at the cost of one XPath query rather
    than of python-docx's ``text``."""
    return any(e.text is None or e.text.strip() for e in _VISIBLE(paragraph))


def _docx(name: str, data: bytes, max_chars: int, max_bytes: int) -> Document:
    import docx  # python-docx
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    if max_bytes:
        _check_zip(name, data, max_bytes)
    try:
        doc = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - a broken zip or XML raises many types: all mean "not a .docx"
        raise ApiError(400, f"{name} is not a readable .docx file: {_docx_problem(exc)}") from None
    found, seen, size = [], set(), 0
    cells = [cell for table in doc.tables for row in table.rows for cell in row.cells]
    body = (Paragraph(p, doc._body) for p in doc.element.body.iterchildren(qn("w:p")) if _visible(p))  # =paragraphs
    for paragraph in [*body, *(p for cell in cells for p in cell.paragraphs if _visible(p._p))]:
        text = paragraph.text
        if text.strip() and paragraph._p not in seen:  # a merged cell appears once per row it spans
            seen.add(paragraph._p)
            found.append(paragraph)
            size += len(text)
    if max_chars and size > MARKUP_ALLOWANCE * max_chars:  # before its sentences are cut
        raise too_many_chars(name, size, max_chars)
    paragraphs = [_Paragraph(paragraph) for paragraph in found]

    def rebuild(translations: list[str]) -> bytes:
        for paragraph, mine in zip(
            paragraphs, _split([len(p.unit.sentences) for p in paragraphs], translations), strict=True
        ):
            paragraph.write(mine)
        out = io.BytesIO()
        doc.save(out)
        return out.getvalue()

    units = [s for p in paragraphs for s in p.unit.sentences]
    return Document(units, rebuild, DOCX_TYPE, _plain(units))
