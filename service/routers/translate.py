"""POST /translate: LibreTranslate's API (JSON or form-encoded), mapped onto the pipeline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from engine.batcher import BatcherClosedError, DeadlineExceededError, QueueFullError
from engine.errors import InputTooLongError, UnsupportedLanguageError
from service.config import Settings
from service.deps import StateDep, check_api_key, get_pipeline
from service.errors import ApiError
from service.pipeline import TooManySentencesError
from service.schemas import ERROR_RESPONSES, TranslateRequest, TranslateResponse

router = APIRouter(tags=["translate"])
T = TypeVar("T")

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
_schema = TranslateRequest.model_json_schema(ref_template="#/components/schemas/{model}")
_form_schema = {**_schema, "properties": {**_schema["properties"], "q": {"type": "string"}}}
OPENAPI_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/TranslateRequest"}},
    "application/x-www-form-urlencoded": {"schema": _form_schema},
    "multipart/form-data": {"schema": _form_schema},
}}}


def document_request_schema(app: FastAPI) -> None:
    """Put TranslateRequest into the OpenAPI components: the JSON body above refers to it (the route reads the body
    itself to accept forms too, so FastAPI does not add it on its own)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {}).setdefault("schemas", {})["TranslateRequest"] = _schema
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise ApiError(413, f"request body ({length} bytes) exceeds the limit of {limit} bytes (max_body_bytes)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body exceeds the limit of {limit} bytes (max_body_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_translate_request(request: Request, settings: Settings) -> TranslateRequest:
    """Parse JSON or form bodies into one model; every failure is a 4xx with a message."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await _read_body(request, settings.max_body_bytes)
    data: Any
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ApiError(422, f"body is not valid JSON: {str(exc)[:200]}") from None
    elif ctype in FORM_TYPES:

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            form = await Request(request.scope, replay).form()
        except Exception as exc:  # noqa: BLE001 - multipart parser errors come in several types
            raise ApiError(422, f"form body cannot be parsed: {exc}") from None
        data = {k: form.get(k) for k in form if k != "q"}
        qs = [v for v in form.getlist("q") if isinstance(v, str)]
        if qs:
            data["q"] = qs[0] if len(qs) == 1 else qs
    else:
        raise ApiError(415, f"unsupported content type {ctype or '(none)'!r}: send application/json or "
                            "application/x-www-form-urlencoded")
    if not isinstance(data, dict):
        raise ApiError(422, "body must be a JSON object with q, source and target")
    try:
        return TranslateRequest.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


def clean_text(text: str) -> str:
    """Replace lone surrogates (invalid Unicode) so every later step sees encodable text."""
    return text.encode("utf-8", "replace").decode("utf-8")


async def until_disconnect(request: Request, work: Coroutine[Any, Any, T], poll_s: float = 0.1) -> T:
    """Await ``work``, cancelling it (so its queued sentences are dropped) if the client goes away."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ApiError(499, "client closed the request")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task  # let the batcher drop the queued sentences before we answer


def _validate(req: TranslateRequest, items: list[str], settings: Settings) -> None:
    if isinstance(req.q, list) and not req.q:
        raise ApiError(400, "q is an empty list: send at least one text")
    if len(items) > settings.max_items:
        raise ApiError(400, f"q has {len(items)} texts, over the limit of {settings.max_items} (max_items)")
    chars = sum(len(i) for i in items)
    if chars > settings.max_chars:
        raise ApiError(413, f"request ({chars} characters) exceeds the limit of {settings.max_chars} characters "
                            "(max_chars)")
    if req.format == "html":
        raise ApiError(400, "format=html is not supported yet: send plain text with format=text")
    if req.source == "auto":
        raise ApiError(400, "source=auto (language detection) is not supported: name the source language "
                            "(see /languages)")
    if req.source == req.target:
        raise ApiError(400, f"source and target are both {req.source!r}: choose two different languages")
    if req.beam_size is not None and req.beam_size > settings.max_beam_size:
        raise ApiError(400, f"beam_size {req.beam_size} is over the limit of {settings.max_beam_size} (max_beam_size)")
    if req.alternatives > settings.max_alternatives:
        raise ApiError(400, f"alternatives {req.alternatives} is over the limit of {settings.max_alternatives} "
                            "(max_alternatives)")


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True,
             responses={**ERROR_RESPONSES, 415: {"model": ERROR_RESPONSES[422]["model"],
                                                 "description": "unsupported content type"}},
             openapi_extra=OPENAPI_BODY, summary="Translate text (LibreTranslate-compatible)")
async def translate(request: Request, state: StateDep) -> TranslateResponse:
    """Translate ``q`` (a text or a list of texts) from ``source`` into ``target``."""
    started = time.monotonic()
    settings = state.settings
    req = await read_translate_request(request, settings)
    check_api_key(state, request, req.api_key)
    pipeline = get_pipeline(state)
    items = [req.q] if isinstance(req.q, str) else list(req.q)
    _validate(req, items, settings)
    try:
        pipeline.translator.check_pair(req.source, req.target)
    except UnsupportedLanguageError as exc:
        raise ApiError(400, str(exc)) from None
    request.state.sizes = {"n_items": len(items), "n_chars": sum(len(i) for i in items)}
    state.metrics.characters.inc(request.state.sizes["n_chars"])
    try:
        results, timing = await until_disconnect(request, pipeline.translate(
            [clean_text(i) for i in items], source=req.source, target=req.target,
            beam_size=req.beam_size or settings.default_beam_size, alternatives=req.alternatives, started=started))
    except InputTooLongError as exc:
        raise ApiError(400, str(exc)) from None
    except TooManySentencesError as exc:
        raise ApiError(413, str(exc)) from None
    except QueueFullError:
        raise ApiError(503, "server busy: the translation queue is full, retry later",
                       {"Retry-After": str(pipeline.retry_after())}) from None
    except DeadlineExceededError:
        raise ApiError(504, f"translation did not finish within {settings.request_timeout_s:g} s "
                            "(request_timeout_s)") from None
    except BatcherClosedError:
        raise ApiError(503, "server is shutting down", {"Retry-After": "5"}) from None
    request.state.timing = timing
    state.window.add_request(timing)
    if isinstance(req.q, str):
        return TranslateResponse(translatedText=results[0].text,
                                 alternatives=results[0].alternatives if req.alternatives else None)
    return TranslateResponse(translatedText=[r.text for r in results],
                             alternatives=[r.alternatives for r in results] if req.alternatives else None)
