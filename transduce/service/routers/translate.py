"""POST /translate: LibreTranslate's API (JSON or form-encoded, read by ``request_body``), mapped onto the pipeline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI, Request

from transduce.service.deps import StateDep, accepted_key, get_pipeline, rate_before_body
from transduce.service.detect import get_detector
from transduce.service.errors import ApiError
from transduce.service.request_body import read_translate_request
from transduce.service.schemas import ERROR_RESPONSES, DetectedLanguage, TranslateRequest, TranslateResponse
from transduce.service.validation import AUTO, known_case, model_languages, validate_request

router = APIRouter(tags=["translate"])
T = TypeVar("T")

_schema = TranslateRequest.model_json_schema(ref_template="#/components/schemas/{model}")
_form_schema = {**_schema, "properties": {**_schema["properties"], "q": {"type": "string"}}}
OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/TranslateRequest"}},
            "application/x-www-form-urlencoded": {"schema": _form_schema},
            "multipart/form-data": {"schema": _form_schema},
        },
    }
}


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


async def until_disconnect(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Await ``work``, cancelling it (so its queued sentences are dropped) if the client goes away.

    One watcher per request waits for the server's ``http.disconnect`` message (the body has been read, so the next
    ``receive`` returns only when the client closes or the response is done) instead of polling; ``work`` runs in
    the request's own task, which the watcher cancels (one task per request fewer than awaiting both)."""
    task = asyncio.current_task()
    assert task is not None
    gone = over = False  # the watcher cancelled the task; the function is done (the answer is being written)

    def on_gone(watcher: asyncio.Future[None]) -> None:
        nonlocal gone
        if not over and not watcher.cancelled() and watcher.exception() is None:
            gone = True
            task.cancel()

    watcher = asyncio.ensure_future(_disconnected(request))
    watcher.add_done_callback(on_gone)
    try:
        return await work  # its cancellation lets the queue drop the sentences before we answer
    except asyncio.CancelledError:
        if not gone:
            raise
        gone = False  # the watcher's cancellation, taken back here
        if task.uncancel() > 0:  # someone else cancelled the task too (shutdown, a timeout around it): theirs stands
            raise
        raise ApiError(499, "client closed the request") from None
    finally:
        over = True  # a watcher that ends from here on cancels nothing
        watcher.cancel()
        if gone:  # the watcher's cancellation came while ``work`` was finishing, and it absorbed it (wait_for
            task.uncancel()  # returns a result that is already there): the task is not left marked as cancelled


async def _disconnected(request: Request) -> None:
    """Return once the client has gone away."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.1)  # a server that answers receive() at once with more (empty) body: do not spin


@router.post(
    "/translate",
    response_model=TranslateResponse,
    response_model_exclude_none=True,
    responses=ERROR_RESPONSES,
    openapi_extra=OPENAPI_BODY,
    summary="Translate text (LibreTranslate-compatible)",
)
async def translate(request: Request, state: StateDep) -> TranslateResponse:
    """Translate ``q`` (a text or a list of texts) from ``source`` into ``target``; with ``source: "auto"`` the
    language of each text is detected (and answered in ``detectedLanguage``)."""
    started = time.monotonic()
    rate_before_body(state, request)
    req = await read_translate_request(request, state.settings)
    accepted_key(state, request, req.api_key)
    pipeline = get_pipeline(state)
    auto = known_case(pipeline.translator, req.source)[0] == AUTO  # AUTO or Auto too, as validation reads it
    detector = await get_detector(model_languages(pipeline.translator)) if auto else None
    job = validate_request(req, state.settings, pipeline.translator, detector)
    request.state.sizes = {"n_items": len(job.items), "n_chars": job.n_chars}
    results, timing = await until_disconnect(request, pipeline.translate(job, started=started))
    state.metrics.characters.inc(job.n_chars)  # translated: not those of a request refused, expired or left
    request.state.timing = timing
    state.window.add_request(timing)
    alternatives = job.num_hypotheses > 1
    detected = [DetectedLanguage(language=d.language, confidence=d.confidence) for d in job.detected or ()]
    pivot = next((r.pivot for r in results if r.pivot), None)  # some text went through English (several models)
    if not job.as_list:
        return TranslateResponse(
            translatedText=results[0].text,
            alternatives=results[0].alternatives if alternatives else None,
            detectedLanguage=detected[0] if detected else None,
            pivot=pivot,
        )
    return TranslateResponse(
        translatedText=[r.text for r in results],
        alternatives=[r.alternatives for r in results] if alternatives else None,
        detectedLanguage=detected or None,
        pivot=pivot,
    )
