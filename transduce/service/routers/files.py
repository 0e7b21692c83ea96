"""POST /translate_file and GET /download_file/{id}/{name} (LibreTranslate's file API).

The upload is counted while it is read: beyond ``max_file_bytes`` (plus ``FORM_ALLOWANCE`` for the form's other
fields and its multipart framing) it is a 413 before the rest is read, and it must arrive within
``request_read_timeout_s`` (408). A file of far more text than ``max_file_chars``, or a .docx that would unpack too
far, is a 413 before it is parsed (``documents.read_document``). The file's units (lines, sentences) go through the
same validation and queue as POST /translate, in requests that fit the request limits (``max_queue_items`` too),
under one deadline for the whole file
(``request_timeout_s``), and are dropped if the client hangs up; the language is detected once, on the file's text,
under ``source: "auto"``. The request is recorded in /latency and /metrics as a /translate is. The rebuilt file waits
for ``file_ttl_s`` seconds under a random id (its name made safe and cut short: ``filestore.safe_name``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import PurePath
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel
from starlette.datastructures import FormData, UploadFile
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable
from starlette.types import Message, Receive

from transduce.engine.text import segment_around, split_long
from transduce.service.config import Settings
from transduce.service.deps import StateDep, accepted_key, get_pipeline, rate_before_body
from transduce.service.detect import MAX_DETECT_CHARS, get_detector
from transduce.service.documents import MEDIA_TYPES, Document, read_document, too_many_chars
from transduce.service.errors import ApiError
from transduce.service.filestore import StoreFullError, ascii_name
from transduce.service.multipart import ClosingBoundary, read_multipart
from transduce.service.observability import RequestTiming
from transduce.service.request_body import content_type
from transduce.service.routers.translate import until_disconnect
from transduce.service.schemas import ERROR_RESPONSES, DetectedLanguage, TranslateRequest
from transduce.service.state import AppState
from transduce.service.validation import (
    AUTO,
    Fitting,
    auto_candidates,
    check_route,
    fitting,
    known_case,
    model_languages,
    validate_request,
)

router = APIRouter(tags=["files"])
FORM_ALLOWANCE = 16_384  # bytes of an upload beside the file: multipart boundaries, part headers, the other fields
DETECT_WINDOWS = 3  # under source=auto, the first this many MAX_DETECT_CHARS windows of the file's text vote
# a translated file is served from this origin: never sniffed into something else, never run (an uploaded HTML
# file keeps its <script> verbatim)
DOWNLOAD_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"}


class FileTranslation(BaseModel):
    """Where the translated file can be downloaded (until it expires)."""

    translatedFileUrl: str  # noqa: N815 - LibreTranslate's field name
    detectedLanguage: DetectedLanguage | None = None  # noqa: N815 - under source=auto, as POST /translate answers


def _pieces(units: list[str], limit: int, fitting: Fitting, max_sentences: int) -> list[tuple[int, str, int]]:
    """(unit index, text, sentences) pieces of at most ``limit`` characters and ``max_sentences`` sentences whose
    sentences each fit (``fitting``: as validation reads them, glossary terms masked): a longer unit is cut between
    its sentences, and a sentence that does not fit is cut at clause marks or spaces into pieces of its own
    (``split_long``, never inside a term: a file never fails on one long sentence, and nothing is dropped). Each
    piece keeps the whitespace after it, so the translated pieces join back with the same spacing; whitespace beyond
    the limit goes on in pieces of its own (blank: sent back as they are)."""
    return [
        (index, text, n)
        for index, unit in enumerate(units)
        for text, n in _unit_pieces(unit, limit, fitting, max_sentences)
    ]


def _unit_pieces(unit: str, limit: int, fitting: Fitting, max_sentences: int) -> list[tuple[str, int]]:
    """One unit's pieces (see ``_pieces``) and the sentences in each, cut where validation cuts sentences (a term
    such as "Acme Inc." ends none)."""
    keep = fitting.kept(unit)
    item = segment_around(unit, keep)
    if len(unit) <= limit and len(item.sentences) <= max_sentences and fitting.fits(unit):
        return [(unit, len(item.sentences))]
    pieces: list[tuple[str, int]] = []
    part, count, alone = "", 0, False  # the piece so far, its sentences, whether nothing may join it

    def add(text: str, after: str, cut: bool, last: bool) -> None:  # a sentence or a part of one (cut), and the
        nonlocal part, count, alone  # whitespace after it: onto this piece if both fit, else onto the next
        full = len(part) + len(text) + len(after) > limit or count >= max_sentences
        if part and (full or (part.strip() and (cut or alone))):  # a part starts a piece; all but the last, alone
            pieces.append((part, count))
            part, count = "", 0
        part, count, alone = part + text, count + 1, cut and not last
        space(after)

    def space(text: str) -> None:  # whitespace: as much as fits onto this piece, the rest in blank pieces
        nonlocal part, count, alone
        while len(part) + len(text) > limit:
            room = limit - len(part)
            pieces.append((part + text[:room], count))
            part, count, alone, text = "", 0, False, text[room:]
        part += text

    space(item.leading)
    at = len(item.leading)
    for sentence, separator in zip(item.sentences, item.separators, strict=True):
        spans = [(a - at, b - at) for a, b in keep if at <= a and b <= at + len(sentence)]
        short = split_long(sentence, lambda text: len(text) <= limit and fitting.fits(text), spans)
        for k, text in enumerate(short):
            body, last = text.rstrip(), k == len(short) - 1
            add(body, text[len(body) :] + (separator if last else ""), len(short) > 1, last)
        at += len(sentence) + len(separator)
    return [*pieces, (part, count)] if part else pieces


async def translate_units(
    units: list[str], source: str, target: str, state: AppState, started: float
) -> tuple[list[str], RequestTiming]:
    """Every unit translated from ``source`` (a language, not ``auto``) through validation and the queue, in order,
    in requests within max_items/max_chars/max_queue_items, all under the deadline ``started + request_timeout_s``;
    with the queue and engine time summed over those requests."""
    settings, pipeline = state.settings, get_pipeline(state)
    most, translator = settings.max_queue_items, pipeline.translator
    reads = fitting(translator, settings, source, target)  # as validation counts; several models: the routed one
    # in a thread: a file's 100,000 characters of long lines took seconds of tokenizing and masking
    pieces = await asyncio.to_thread(_pieces, units, settings.max_chars, reads, most)
    out = [""] * len(units)
    queue_ms = inference_ms = 0.0
    start = 0
    while start < len(pieces):
        end, size, sentences = start, 0, 0
        while (
            end < len(pieces)
            and end - start < settings.max_items
            and size + len(pieces[end][1]) <= settings.max_chars
            and sentences + pieces[end][2] <= most
        ):
            size, sentences, end = size + len(pieces[end][1]), sentences + pieces[end][2], end + 1
        end = max(end, start + 1)  # (every piece is within the limits alone)
        request = TranslateRequest(q=[text for _, text, _ in pieces[start:end]], source=source, target=target)
        job = validate_request(request, settings, pipeline.translator)
        sent = time.monotonic()
        results, timing = await pipeline.translate(job, started=started)  # the file's deadline, not the chunk's
        queue_ms += max(0.0, timing.queue_ms - (sent - started) * 1000)
        inference_ms += timing.inference_ms
        for (index, _, _), result in zip(pieces[start:end], results, strict=True):
            out[index] += result.text
        start = end
    return out, RequestTiming((time.monotonic() - started) * 1000, queue_ms, inference_ms)


async def source_language(document: Document, source: str, target: str, state: AppState) -> DetectedLanguage | None:
    """Check the pair; under ``auto``, the file's language, detected once on its text (the first windows of it vote,
    ties going to the more confident); None when ``source`` was named."""
    translator = get_pipeline(state).translator
    if source != AUTO:
        check_route(translator, source, target)
        return None
    detector, candidates = auto_candidates(target, translator, await get_detector(model_languages(translator)))
    text = document.text[: MAX_DETECT_CHARS * DETECT_WINDOWS]
    windows = [text[at : at + MAX_DETECT_CHARS] for at in range(0, len(text), MAX_DETECT_CHARS)] or [""]
    votes: dict[str, list[float]] = {}
    for window in windows:
        found = detector.detect(window, candidates)
        votes.setdefault(found.language, []).append(found.confidence)
    language = max(votes, key=lambda code: (len(votes[code]), sum(votes[code])))
    return DetectedLanguage(language=language, confidence=round(sum(votes[language]) / len(windows), 1))


def _bounded(request: Request, settings: Settings, ending: ClosingBoundary) -> Receive:
    """The request's ``receive``, counting the body: 413 once it is over max_file_bytes + FORM_ALLOWANCE (as its
    Content-Length declares it, before anything is read, so an honest client is told before it sends the file rather
    than cut off while sending it; else as it arrives), 408 when it has not all arrived ``request_read_timeout_s``
    after the first read. ``ending`` watches for the closing boundary."""
    limit, timeout_s = settings.max_file_bytes + FORM_ALLOWANCE, settings.request_read_timeout_s
    length = request.headers.get("content-length", "")
    declared = int(length[:19]) if length.isdigit() else 0  # 19 digits of a longer one are already far too many
    received, deadline = 0, 0.0

    def check() -> None:  # the one size check: of the body as declared, and as received so far
        if max(declared, received) > limit:
            raise ApiError(
                413,
                f"upload exceeds the limit of {settings.max_file_bytes} bytes (max_file_bytes; the form's other "
                f"fields may add {FORM_ALLOWANCE} bytes)",
                {"Connection": "close"},
            )

    async def bounded() -> Message:
        nonlocal received, deadline
        check()
        deadline = deadline or asyncio.get_running_loop().time() + timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                message = await request.receive()
        except TimeoutError:
            raise ApiError(
                408, f"upload not received within {timeout_s:g} s (request_read_timeout_s)", {"Connection": "close"}
            ) from None
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            check()
            ending.feed(message.get("body", b""))
        return message

    return bounded


async def _read_form(request: Request, settings: Settings) -> FormData:
    """The multipart form, read within the upload limits (before anything of it is used)."""
    media, params = content_type(request)
    if media != "multipart/form-data":
        raise ApiError(415, "send the file as multipart/form-data with the fields file, source and target")
    ending = ClosingBoundary(params.get("boundary", ""))
    bounded = Request(request.scope, _bounded(request, settings, ending))
    return await read_multipart(bounded, params, ending=ending, upload=True, max_files=1, max_fields=8)


@router.post(
    "/translate_file",
    response_model=FileTranslation,
    response_model_exclude_none=True,
    responses={code: ERROR_RESPONSES[code] for code in (400, 401, 403, 408, 413, 415, 422, 429, 503, 504)},
    summary="Translate a file (LibreTranslate-compatible): .txt, .md, .html, .docx",
)
async def translate_file(request: Request, state: StateDep) -> FileTranslation:
    """Multipart ``file``, ``source`` (or ``auto``), ``target``, optional ``api_key``; answers where to download it;
    503 when ``max_file_jobs`` files are in work already (a file's parts take up to 1 KB of memory per character
    of text while it is translated: 160 MB for 200,000 characters of one-word table cells). The upload is read and
    the key checked first: clients without a key, sending slowly, held every slot."""
    started = time.monotonic()
    rate_before_body(state, request)
    form = await _read_form(request, state.settings)
    upload, source, target, key = (form.get(field) for field in ("file", "source", "target", "api_key"))
    data = await upload.read() if isinstance(upload, UploadFile) else b""
    await form.close()  # the spooled upload
    accepted_key(state, request, key if isinstance(key, str) else None)
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise ApiError(422, "file: send the file to translate as the multipart field 'file'")
    if not isinstance(source, str) or not isinstance(target, str) or not source or not target:
        raise ApiError(422, "source and target: name both languages (source may be 'auto')")
    if state.file_jobs >= state.settings.max_file_jobs:
        raise ApiError(
            503,
            f"server busy: the limit of {state.settings.max_file_jobs} files translated at once (max_file_jobs) is "
            "reached, retry later",
            {"Retry-After": str(FILE_JOBS_RETRY_S)},
        )
    state.file_jobs += 1
    try:
        return await _translate_file(request, state, upload.filename, data, (source, target), started)
    finally:
        state.file_jobs -= 1


async def _translate_file(
    request: Request, state: AppState, name: str, data: bytes, pair: tuple[str, str], started: float
) -> FileTranslation:
    settings = state.settings
    source, target = known_case(get_pipeline(state).translator, *pair)  # EN is en, AUTO is auto
    _room_for(state, len(data))  # its translation is about as large: refused now rather than after the work
    document = await asyncio.to_thread(  # too much text, or a .docx unpacking too far: refused before it is parsed
        read_document, name, data, max_chars=settings.max_file_chars, max_bytes=settings.max_file_bytes
    )
    chars = sum(len(u) for u in document.units)
    if chars > settings.max_file_chars:
        raise too_many_chars(name, chars, settings.max_file_chars)
    detected = await source_language(document, source, target, state)
    request.state.sizes = {"n_items": len(document.units), "n_chars": chars}
    if (detected.language if detected is not None else source) == target:  # already in it: sent back as it is
        translated, timing = data, RequestTiming((time.monotonic() - started) * 1000, 0.0, 0.0)
    else:
        language = detected.language if detected is not None else source
        work = translate_units(document.units, language, target, state, started)
        translations, timing = await until_disconnect(request, work)
        translated = await asyncio.to_thread(document.rebuild, translations)
        timing = RequestTiming((time.monotonic() - started) * 1000, timing.queue_ms, timing.inference_ms)
    request.state.timing = timing
    state.window.add_request(timing)
    state.metrics.characters.inc(chars)  # translated: not those of a file refused, expired or left
    path = PurePath(name)
    try:
        file_id, stored = await asyncio.to_thread(state.files.save, f"{path.stem}.{target}{path.suffix}", translated)
    except StoreFullError as exc:
        raise _store_full(exc) from None
    base = settings.public_url or str(request.base_url).rstrip("/")  # not the Host header, when it is set
    url = f"{base}/download_file/{file_id}/{quote(stored)}"
    return FileTranslation(translatedFileUrl=url, detectedLanguage=detected)


FILE_JOBS_RETRY_S = 5  # Retry-After when max_file_jobs files are in work


def _room_for(state: AppState, size: int) -> None:
    """503 now when a translated file of ``size`` bytes would not fit the store."""
    try:
        state.files.check_room(size)
    except StoreFullError as exc:
        raise _store_full(exc) from None


def _store_full(exc: StoreFullError) -> ApiError:
    if not exc.retry_after:  # the file alone is over the limit
        return ApiError(413, exc.message)
    return ApiError(503, exc.message, {"Retry-After": str(exc.retry_after)})


class _Download(FileResponse):
    """Starlette's file response, but a malformed ``Range`` header is ignored (the whole file is sent, 200, as RFC
    9110 lets a server do and nginx does) instead of a plain-text 400; ``download_file`` answers an unsatisfiable one
    (416) in JSON before this response exists."""

    @classmethod
    def _parse_range_header(cls, http_range: str, file_size: int) -> list[tuple[int, int]]:
        try:
            return super()._parse_range_header(http_range, file_size)
        except MalformedRangeHeader:
            return []


def _unsatisfiable(request: Request, size: int) -> ApiError | None:
    """A 416 in this API's words for a ``Range`` that starts at or past the file's end, where Starlette would send
    one with an empty plain-text body (with ``If-Range`` the file may be sent whole instead: left to Starlette)."""
    http_range = request.headers.get("range")
    if http_range is None or "if-range" in request.headers:
        return None
    try:
        FileResponse._parse_range_header(http_range, size)
    except RangeNotSatisfiable:
        return ApiError(
            416, f"the range asked for starts past the file's end ({size} bytes)", {"Content-Range": f"bytes */{size}"}
        )
    except MalformedRangeHeader:
        pass  # ignored: the whole file
    return None


@router.get("/download_file/{file_id}/{name}", responses={404: ERROR_RESPONSES[404]})
async def download_file(file_id: str, name: str, request: Request, state: StateDep) -> FileResponse:
    """A translated file, until ``file_ttl_s`` after it was made (never sniffed, never run by the browser); a
    ``Range`` of it as Starlette serves one, a malformed one ignored."""
    path = state.files.find(file_id, name)
    if path is None:
        raise ApiError(404, f"no such file: translated files are kept for {state.settings.file_ttl_s:g} s")
    try:
        size = path.stat().st_size
    except FileNotFoundError:  # expired between find() and here
        raise ApiError(404, f"no such file: translated files are kept for {state.settings.file_ttl_s:g} s") from None
    if (refused := _unsatisfiable(request, size)) is not None:
        raise refused
    media_type = MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream")
    # RFC 6266: the name in ASCII for every client, and as written for those that read filename* (curl -J,
    # browsers); Starlette sends only the latter for a name outside ASCII
    disposition = f'attachment; filename="{ascii_name(name)}"'
    if quote(name) != name:
        disposition += f"; filename*=utf-8''{quote(name)}"
    headers = {**DOWNLOAD_HEADERS, "Content-Disposition": disposition}
    return _Download(path, media_type=media_type, headers=headers)
