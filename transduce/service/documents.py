"""Documents for POST /translate_file: a file's translatable units out, the file rebuilt around their translations.

- .txt translates line by line (blank lines and each line's indentation kept).
- .md keeps its structure (``markdowndoc``): code, HTML blocks and link destinations are never translated; headings,
  list items, quotes and table cells keep their markers; a paragraph is translated as one text.
- .html/.htm goes through ``htmldoc`` as ``format: "html"`` does (tags, attributes, scripts kept).
- .docx goes through ``docxdoc``: each paragraph of the body, its tables and content controls.

Before anything is parsed, a text file of over ``MARKUP_ALLOWANCE`` times the character limit is refused, and so is a
.docx that would unpack to over ``DOCX_INFLATION`` times the byte limit, or that holds over ``MAX_DOCX_PARTS`` files
(a zip bomb): 413s.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath

from transduce.service.errors import ApiError
from transduce.service.htmldoc import parse_html
from transduce.service.markdowndoc import Markdown, MarkdownText
from transduce.textmarks import line_end

TEXT_TYPES = {".txt": "text/plain; charset=utf-8", ".md": "text/markdown; charset=utf-8"}
HTML_TYPES = {".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8"}
DOCX = ".docx"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MEDIA_TYPES = {**TEXT_TYPES, **HTML_TYPES, DOCX: DOCX_TYPE}  # what a translated file is served as
MARKUP_ALLOWANCE = 2  # a text file may hold this many times max_file_chars before it is parsed (markup, indentation)
DOCX_INFLATION = 20  # a .docx may unpack to this many times max_file_bytes
MAX_DOCX_PARTS = 5_000  # files in a .docx's zip (a real document holds tens, a few hundred with many pictures)
MAX_DOCX_ELEMENTS = 200_000  # XML elements in a .docx (a 30-page document holds tens of thousands)
MAX_DOCX_ATTRIBUTES = 1_000_000  # XML attributes in a .docx, namespace declarations included (about 1.5 per element)


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
        from transduce.service.docxdoc import read_docx  # (which imports this module)

        return read_docx(name, data, max_chars, max_bytes)
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


def split_counts(counts: Sequence[int], translations: Sequence[str]) -> list[Sequence[str]]:
    """``translations`` cut into consecutive slices of ``counts`` items."""
    out, at = [], 0
    for n in counts:
        out.append(translations[at : at + n])
        at += n
    return out


def plain_text(units: Sequence[str]) -> str:
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
    newline = line_end(text)
    rows = Markdown(text.replace("\r\n", "\n").replace("\r", "\n")).read()
    blocks = [part for row in rows for part in row if isinstance(part, MarkdownText)]

    def rebuild(translations: list[str]) -> bytes:
        mine = dict(
            zip(map(id, blocks), split_counts([len(b.unit.sentences) for b in blocks], translations), strict=True)
        )
        out = ["".join(p if isinstance(p, str) else p.render(mine[id(p)]) for p in row) for row in rows]
        return "\n".join(out).replace("\n", newline).encode()

    units = [s for b in blocks for s in b.unit.sentences]
    return Document(units, rebuild, TEXT_TYPES[".md"], plain_text(units))
