"""Reading multipart/form-data bodies (POST /translate, /detect and /translate_file) strictly.

Starlette's parser is used for the framing, with two things it lets by made errors in this project's words:
- a field's text that is not in the body's charset (UTF-8 unless the Content-Type names another) is a 422, where
  Starlette reads it as Latin-1 ("Grüße" became "GrÃ¼Ã\x9fe"), and a charset Python does not know is a 415;
- a body that ends before its closing boundary (an upload cut short) is a 422: the parser keeps the parts that
  came before it, silently (``ClosingBoundary`` watches for it as the body arrives).
"""

from __future__ import annotations

import codecs
from contextlib import aclosing
from typing import Any

from python_multipart.multipart import parse_options_header
from starlette.datastructures import FormData
from starlette.formparsers import MultiPartParser
from starlette.requests import ClientDisconnect, Request

from transduce.service.errors import ApiError
from transduce.service.filestore import disk_full


class ClosingBoundary:
    """Whether a multipart body's closing boundary went by, looked for in the stream as it arrives (whatever follows
    it: an epilogue of any length is legal), keeping only the bytes a boundary split across reads needs. The
    delimiter starts with the CRLF that precedes every one, so the boundary's text inside a part never counts (a body
    starts as if after one)."""

    def __init__(self, boundary: str) -> None:
        self.closing = b"\r\n--" + boundary.encode("latin-1") + b"--"
        self.seen, self._carry = False, b"\r\n"

    def feed(self, data: bytes) -> None:
        if not self.seen and data:
            window = self._carry + data
            self.seen = self.closing in window
            self._carry = window[-(len(self.closing) - 1) :]


class FieldProblem(ValueError):
    """A form field whose bytes are not text in its charset (422), or that names a charset Python does not know
    (415)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _StrictParser(MultiPartParser):
    """Starlette's multipart parser, but a field's value is read as the body's charset (``charset``, checked by
    ``read_multipart``; Starlette's own falls back to Latin-1 for one it does not know, an empty one too) or as the
    part's own ``Content-Type`` names (RFC 7578 4.4), and one that does not decode is an error, not Latin-1."""

    def __init__(self, *args: Any, charset: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.charset = charset

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is not None:
            super().on_part_end()
            return
        charset, name = self.charset, part.field_name[:40]
        for header, value in part.item_headers:
            if header == b"content-type" and (own := parse_options_header(value)[1].get(b"charset")):
                try:
                    charset = codecs.lookup(own.decode("latin-1").strip()).name
                except LookupError:
                    raise FieldProblem(
                        415, f"the form field {name!r} names an unsupported charset: send it as UTF-8"
                    ) from None
        try:
            text = bytes(part.data).decode(charset)
        except UnicodeDecodeError:
            raise FieldProblem(
                422, f"the form field {name!r} is not {charset} text: send the form as {charset}"
            ) from None
        self.items.append((part.field_name, text))


def form_problem(exc: BaseException, *, upload: bool) -> str:
    """Why the multipart parser refused a body, in this API's terms (its own messages name its limits); ``upload``:
    the body is /translate_file's (a file and a few fields), else /translate's or /detect's (fields)."""
    said: list[str] = []
    seen: BaseException = exc
    for _ in range(4):
        said.append(str(getattr(seen, "detail", "") or seen))
        if (nxt := seen.__cause__ or seen.__context__) is None:
            break
        seen = nxt
    detail = " ".join(said).lower()
    if "too many files" in detail:
        return "send one file, in the field file"
    if "too many fields" in detail:
        if upload:
            return "it has too many fields (send file, source and target; api_key and format are optional)"
        return "it has too many fields (at most 1,000)"
    if "missing boundary" in detail:
        return "its Content-Type has no boundary, so the parts cannot be told apart"
    if "header size" in detail:  # the parser's limit on one part's headers: 4 KiB and a little
        if upload:
            return "a part's headers take more than 4 KiB (a file name that long?): send the file under a shorter name"
        return "a part's headers take more than 4 KiB"
    if "exceeded maximum size" in detail:
        return "a field other than the file holds more than 1 MiB" if upload else "a field holds more than 1 MiB"
    return (
        "it is not well-formed multipart/form-data (each part opens with --BOUNDARY on a line of its own, lines end "
        "in CRLF, and the body ends with --BOUNDARY--)"
    )


async def read_multipart(
    request: Request,
    params: dict[str, str],
    *,
    ending: ClosingBoundary,
    upload: bool = False,
    max_files: int = 1000,
    max_fields: int = 1000,
) -> FormData:
    """The multipart form of ``request`` (whose ``receive`` feeds ``ending`` every body chunk it reads), its
    Content-Type's ``params`` as ``request_body.content_type`` reads them (``upload``: /translate_file's). ApiError:
    415 for an unknown charset, 422 for an empty or missing boundary, a field that is not text, a body the parser
    refuses or one cut short; a disconnect (``ClientDisconnect``) and the receive's own ApiErrors go through. Files
    in the form are spooled (closed again when reading fails)."""
    charset = params.get("charset", "").strip().lower() or "utf-8"
    try:
        charset = codecs.lookup(charset).name
    except LookupError:
        raise ApiError(415, f"unsupported charset {charset[:40]!r}: send the form body as UTF-8") from None
    if "boundary" not in params:
        raise ApiError(
            422, f"the multipart body cannot be read: {form_problem(ValueError('missing boundary'), upload=upload)}"
        )
    if not params["boundary"]:
        raise ApiError(422, "the multipart boundary is empty: RFC 2046 wants 1 to 70 characters")
    try:
        async with aclosing(request.stream()) as stream:
            parser = _StrictParser(request.headers, stream, max_files=max_files, max_fields=max_fields, charset=charset)
            form = await parser.parse()
    except (ApiError, ClientDisconnect):
        raise
    except FieldProblem as exc:
        raise ApiError(exc.status, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the multipart parser raises several types
        if disk_full(exc):  # a file part over 1 MB is spooled to the temp dir
            raise ApiError(503, "no disk space left to receive the file: retry later", {"Retry-After": "60"}) from None
        raise ApiError(422, f"the multipart body cannot be read: {form_problem(exc, upload=upload)}") from None
    if not ending.seen:  # the parser keeps what came before, silently
        await form.close()
        raise ApiError(422, "the multipart body ends before its closing boundary: it was cut short, send it whole")
    return form
