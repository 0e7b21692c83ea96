"""Reading a POST /translate body into a ``TranslateRequest``: JSON or form-encoded, uncompressed, within
``max_body_bytes`` and ``request_read_timeout_s``; every failure is an ``ApiError`` (4xx) in this project's words."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import BaseModel, ValidationError
from python_multipart.multipart import parse_options_header
from starlette.datastructures import FormData, UploadFile
from starlette.requests import ClientDisconnect

from transduce.service.config import Settings
from transduce.service.errors import CLIENT_GONE, ApiError
from transduce.service.field_errors import MAX_DIGITS, form_number, validation_message
from transduce.service.glossary import SHAPE, entry_problem
from transduce.service.multipart import ClosingBoundary, read_multipart
from transduce.service.schemas import TranslateRequest

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
NUMERIC_FIELDS = ("alternatives", "beam_size")


M = TypeVar("M", bound=BaseModel)


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, within ``limit`` bytes and ``timeout_s`` seconds; 499 if the client hangs up meanwhile."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ApiError(413, f"request body ({length} bytes) exceeds the limit of {limit} bytes (max_body_bytes)")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"request body exceeds the limit of {limit} bytes (max_body_bytes)")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            f"request body not received within {timeout_s:g} s (request_read_timeout_s)",
            {"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise ApiError(CLIENT_GONE, "client closed the connection while sending the request body") from None
    return b"".join(chunks)


class _BodyProblem(ValueError):
    """A JSON body this service refuses although Python's parser would take it (or fail in its own words)."""


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise _BodyProblem(f"body has a number with more than {MAX_DIGITS} digits, more than any field takes")
    return int(digits)


def _no_constants(name: str) -> Any:
    raise _BodyProblem(f"body is not valid JSON: {name} is not a JSON value")


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body``; ApiError 422 in this project's words when it is not one we accept."""
    try:
        return json.loads(body, parse_int=_bounded_int, parse_constant=_no_constants)
    except _BodyProblem as exc:
        raise ApiError(422, str(exc)) from None
    except UnicodeDecodeError:
        raise ApiError(422, "body is not valid JSON: it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ApiError(422, f"body is not valid JSON: syntax error at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise ApiError(422, "body nests arrays or objects too deeply") from None
    except ValueError:
        raise ApiError(422, "body is not valid JSON") from None


def content_type(request: Request) -> tuple[str, dict[str, str]]:
    """The request's media type (lower case) and its parameters (``charset``, ``boundary``: quotes removed), read by
    the multipart parser's own ``parse_options_header``."""
    media, params = parse_options_header(request.headers.get("content-type", ""))
    return media.decode("latin-1").lower(), {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in params.items()
    }


def _decoded_pairs(raw: bytes, charset: str, what: str) -> list[tuple[str, str | UploadFile]]:
    """The fields of urlencoded ``raw`` (a form body or a query string), its bytes and its percent-escapes alike read
    as ``charset``: a 415 for a charset Python does not know, a 422 for text that is not in it."""
    try:
        text = raw.decode(charset)
        return [*parse_qsl(text, keep_blank_values=True, encoding=charset, errors="strict")]
    except LookupError:
        raise ApiError(415, f"unsupported charset {charset[:40]!r}: send the {what} as UTF-8") from None
    except UnicodeError:
        raise ApiError(422, f"the {what} is not {charset} text (its percent-escapes included)") from None


async def _parse_form(request: Request, body: bytes) -> dict[str, Any]:
    """A form body's fields. A urlencoded one is read here, as UTF-8 unless its Content-Type names another charset
    (Starlette's parser reads raw bytes as Latin-1, garbling `curl -d 'q=schöne Grüße'`); multipart by
    ``multipart.read_multipart``, as strictly (a field not in the charset, or a body cut short, is a 422)."""
    media, params = content_type(request)
    if media == FORM_TYPES[0]:
        charset = params.get("charset", "").lower() or "utf-8"
        return _form_fields(FormData(_decoded_pairs(body, charset, "form body")))

    async def replay() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    ending = ClosingBoundary(params.get("boundary", ""))
    ending.feed(body)
    form = await read_multipart(Request(request.scope, replay), params, ending=ending)
    try:
        return _form_fields(form)
    finally:
        await form.close()  # a file part (not a field here) was spooled


def _query_fields(request: Request) -> dict[str, Any]:
    """The query string's fields, as a form's."""
    pairs = _decoded_pairs(request.scope.get("query_string", b""), "utf-8", "query string")
    return _form_fields(FormData(pairs)) if pairs else {}


def _form_fields(form: FormData) -> dict[str, Any]:
    """A form's (or a query string's) fields as the JSON body would hold them: q one text or a list (q sent several
    times), any other field sent several times its first value, files left out (as LibreTranslate's werkzeug reads a
    form), the glossary parsed from its JSON text, numbers from their digits."""
    texts: dict[str, list[str]] = {}  # in one pass: getlist() per key scans every pair (20,000 keys: 8.8 s)
    for key, value in form.multi_items():
        values = texts.setdefault(key, [])
        if isinstance(value, str):
            values.append(value)
    data: dict[str, Any] = {k: values[0] for k, values in texts.items() if values and k != "q"}
    qs = texts.get("q", [])
    if qs:
        data["q"] = qs[0] if len(qs) == 1 else qs
    if isinstance(data.get("glossary"), str):  # a form sends the glossary as JSON text; an empty one is not given
        data["glossary"] = _form_glossary(data["glossary"])
        if data["glossary"] is None:
            del data["glossary"]
    for field in NUMERIC_FIELDS:  # every form value is text: numbers are decimal digits, an empty one is not given
        raw = data.get(field)
        if isinstance(raw, str):
            try:
                number = form_number(field, raw)
            except ValueError as exc:
                raise ApiError(422, str(exc)) from None
            if number is None:
                del data[field]
            else:
                data[field] = number
    return data


def _form_glossary(raw: str) -> Any:
    """The glossary of a form body, sent as JSON text; None when empty; ApiError 422 when it is not JSON."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ApiError(
            422, f"invalid request: glossary is not valid JSON{where}; in a form body send it as JSON text: {SHAPE}"
        ) from None


def _problem(errors: list[Any], data: Any) -> str:
    """One message for a body's validation errors; the glossary's (a nested list) worded by ``entry_problem``."""
    others = [e for e in errors if e.get("loc", ())[:1] != ("glossary",)]
    glossary = [e for e in errors if e.get("loc", ())[:1] == ("glossary",)]
    message = validation_message(others, data) if others else "invalid request"
    if not glossary:
        return message
    return f"{message}{'; ' if others else ': '}{entry_problem(glossary[0], data, 'glossary')}"


def _check_content_encoding(request: Request) -> None:
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise ApiError(
            415,
            f"unsupported content encoding {encoding[:40]!r}: send the body uncompressed (requests are small: at "
            "most max_chars characters)",
            {"Accept-Encoding": "identity"},
        )


async def read_body_as(request: Request, settings: Settings, model: type[M], fields: str) -> M:
    """Parse a JSON or form body into ``model`` (``fields`` names what the body must hold, for the message); every
    failure is a 4xx in our own words (415 content type or encoding, 408/413 body, 422 shape)."""
    ctype = content_type(request)[0]
    json_body = ctype == "application/json" or ctype.endswith("+json")
    unsupported = ApiError(
        415,
        f"unsupported content type {ctype[:80] or '(none)'!r}: send application/json or "
        "application/x-www-form-urlencoded (or, with no body, the fields in the query string)",
    )
    if not json_body and ctype not in FORM_TYPES and (ctype or not request.url.query):
        raise unsupported
    _check_content_encoding(request)
    body = await _read_body(request, settings.max_body_bytes, settings.request_read_timeout_s)
    query_key: Any = None
    if json_body:
        data: Any = parse_json(body)
    elif ctype and body:  # the query string's fields over the form's, as LibreTranslate reads request.values
        query = _query_fields(request)
        query_key = query.pop("api_key", None)
        data = {**await _parse_form(request, body), **query}
    elif not body:  # no body: the fields are in the query string, as LibreTranslate also reads them
        data = _query_fields(request)
        query_key = data.pop("api_key", None)
    else:
        raise unsupported
    if not isinstance(data, dict):
        raise ApiError(422, f"body must be a JSON object with {fields}")
    if isinstance(query_key, str):  # over the form's; as long as a Bearer key may be (MAX_KEY_CHARS is a body's)
        data.pop("api_key", None)
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        raise ApiError(422, _problem(exc.errors(), data)) from None
    if isinstance(query_key, str) and "api_key" in type(validated).model_fields:
        validated = validated.model_copy(update={"api_key": query_key})
    return validated


async def read_translate_request(request: Request, settings: Settings) -> TranslateRequest:
    """The body of POST /translate."""
    return await read_body_as(request, settings, TranslateRequest, "q, source and target")
