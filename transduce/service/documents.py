"""Documents for POST /translate_file: a file's translatable units out, the file rebuilt around their translations.

Plain text translates line by line (blank lines and each line's indentation kept); Markdown also keeps list and
heading markers, block quotes and fenced code blocks (never translated); .docx translates each paragraph of the
body and of its tables (a paragraph's text goes into its first run, so the paragraph keeps that run's formatting).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

from transduce.service.errors import ApiError

TEXT_TYPES = {".txt": "text/plain; charset=utf-8", ".md": "text/markdown; charset=utf-8"}
DOCX = ".docx"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MEDIA_TYPES = {**TEXT_TYPES, DOCX: DOCX_TYPE}  # what a translated file is served as
_MD_PREFIX = re.compile(r"^(\s*(?:>\s*)*(?:#{1,6}\s+|[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,9}[.)]\s+)?)(.*?)(\s*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Document:
    """The units to translate and how to put the file back together from their translations."""

    units: list[str]
    rebuild: Callable[[list[str]], bytes]
    media_type: str


def supported_types() -> list[str]:
    """The file name endings POST /translate_file accepts."""
    return [*TEXT_TYPES, DOCX]


def read_document(name: str, data: bytes) -> Document:
    """Parse an uploaded file by its name's ending; a type we cannot read, or a broken file, is a 400."""
    suffix = PurePath(name).suffix.lower()
    if suffix in TEXT_TYPES:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ApiError(400, f"{name} is not UTF-8 text: save it as UTF-8 and send it again") from None
        return _markdown(text) if suffix == ".md" else _text(text)
    if suffix == DOCX:
        return _docx(name, data)
    raise ApiError(400, f"files of type {suffix or '(none)'!r} are not supported: send {', '.join(supported_types())}")


def _lines(text: str, split: Callable[[str], tuple[str, str, str] | None]) -> Document:
    """Line-wise documents: ``split(line)`` gives (prefix, text to translate, suffix), or None to keep the line."""
    lines = text.split("\n")
    parts = [split(line) for line in lines]
    units = [p[1] for p in parts if p is not None]

    def rebuild(translations: list[str]) -> bytes:
        it = iter(translations)
        out = [line if p is None else p[0] + next(it) + p[2] for line, p in zip(lines, parts, strict=True)]
        return "\n".join(out).encode()

    return Document(units, rebuild, TEXT_TYPES[".txt"])


def _text(text: str) -> Document:
    def split(line: str) -> tuple[str, str, str] | None:
        body = line.strip()
        if not body:
            return None
        start = line.index(body[0])
        return line[:start], body, line[start + len(body) :]

    return _lines(text, split)


def _markdown(text: str) -> Document:
    in_code = False

    def split(line: str) -> tuple[str, str, str] | None:
        nonlocal in_code
        if _FENCE.match(line):
            in_code = not in_code
            return None
        match = _MD_PREFIX.match(line)
        if in_code or match is None or not match.group(2).strip() or line.startswith(("    ", "\t")):
            return None  # code, blank, marker-only or an indented code block
        return match.group(1), match.group(2), match.group(3)

    document = _lines(text, split)
    document.media_type = TEXT_TYPES[".md"]
    return document


def _docx(name: str, data: bytes) -> Document:
    import docx  # python-docx

    try:
        doc = docx.Document(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - a broken zip or XML raises many types: all mean "not a .docx"
        raise ApiError(400, f"{name} is not a readable .docx file ({type(exc).__name__})") from None
    paragraphs, seen = [], set()
    cells = [cell for table in doc.tables for row in table.rows for cell in row.cells]
    for paragraph in [*doc.paragraphs, *(p for cell in cells for p in cell.paragraphs)]:
        if paragraph.text.strip() and paragraph._p not in seen:  # a merged cell appears once per row it spans
            seen.add(paragraph._p)
            paragraphs.append(paragraph)

    def rebuild(translations: list[str]) -> bytes:
        for paragraph, text in zip(paragraphs, translations, strict=True):
            runs = paragraph.runs
            if runs:
                runs[0].text = text
                for run in runs[1:]:
                    run.text = ""
            else:  # text only in hyperlinks or fields: append a plain run
                paragraph.add_run(text)
        out = io.BytesIO()
        doc.save(out)
        return out.getvalue()

    return Document([p.text for p in paragraphs], rebuild, DOCX_TYPE)
