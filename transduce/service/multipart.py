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


class FieldNotText(ValueError):
    """A form field whose bytes are not text in the body's charset."""

    def __init__(self, field: str, charset: str) -> None:
        super().__init__(f"the form field {field[:40]!r} is not {charset} text: send the form as {charset}")


class _StrictParser(MultiPartParser):
    """Starlette's multipart parser, but a field's value that does not decode is an error, not Latin-1."""

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is None:
            try:
                text = bytes(part.data).decode(self._charset)
            except UnicodeDecodeError:
                raise FieldNotText(part.field_name, self._charset) from None
            self.items.append((part.field_name, text))
        else:
            super().on_part_end()


def form_problem(exc: BaseException) -> str:
    """Why the multipart parser refused a body, in this API's terms (its own messages name its limits)."""
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
        return "it has too many fields (send file, source and target; api_key and format are optional)"
    if "boundary" in detail:
        return "its Content-Type has no boundary, so the parts cannot be told apart"
    if "header size" in detail:  # the parser's limit on one part's headers: 4 KiB and a little
        return "a part's headers take more than 4 KiB (a file name that long?): send the file under a shorter name"
    if "exceeded maximum size" in detail:
        return "a field other than the file holds more than 1 MiB"
    return "it is not well-formed multipart/form-data"


async def read_multipart(
    request: Request, params: dict[str, str], *, ending: ClosingBoundary, max_files: int = 1000, max_fields: int = 1000
) -> FormData:
    """The multipart form of ``request`` (whose ``receive`` feeds ``ending`` every body chunk it reads), its
    Content-Type's ``params`` as ``request_body.content_type`` reads them. ApiError: 415 for an unknown charset, 422
    for an empty or missing boundary, a field that is not text, a body the parser refuses or one cut short; a
    disconnect (``ClientDisconnect``) and the receive's own ApiErrors go through. Files in the form are spooled
    (closed again when reading fails)."""
    charset = params.get("charset", "").strip().lower() or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        raise ApiError(415, f"unsupported charset {charset[:40]!r}: send the form body as UTF-8") from None
    if "boundary" not in params:
        raise ApiError(422, f"the multipart body cannot be read: {form_problem(ValueError('no boundary'))}")
    if not params["boundary"]:
        raise ApiError(422, "the multipart boundary is empty: RFC 2046 wants 1 to 70 characters")
    try:
        async with aclosing(request.stream()) as stream:
            parser = _StrictParser(request.headers, stream, max_files=max_files, max_fields=max_fields)
            form = await parser.parse()
    except (ApiError, ClientDisconnect):
        raise
    except FieldNotText as exc:
        raise ApiError(422, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the multipart parser raises several types
        if disk_full(exc):  # a file part over 1 MB is spooled to the temp dir
            raise ApiError(503, "no disk space left to receive the file: retry later", {"Retry-After": "60"}) from None
        raise ApiError(422, f"the multipart body cannot be read: {form_problem(exc)}") from None
    if not ending.seen:  # the parser keeps what came before, silently
        await form.close()
        raise ApiError(422, "the multipart body ends before its closing boundary: it was cut short, send it whole")
    return form
