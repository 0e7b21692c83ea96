"""POST /translate_file and GET /download_file/{id}/{name} (LibreTranslate's file API).

A file's units (lines, paragraphs) go through the same validation and queue as POST /translate, in requests that
fit the request limits; the rebuilt file waits for ``file_ttl_s`` seconds under a random id.
"""

from __future__ import annotations

import time
from pathlib import PurePath

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel
from starlette.datastructures import UploadFile

from transduce.engine.text import segment
from transduce.service.deps import StateDep, check_api_key, get_pipeline
from transduce.service.detect import get_detector
from transduce.service.documents import MEDIA_TYPES, read_document
from transduce.service.errors import ApiError
from transduce.service.schemas import ERROR_RESPONSES, TranslateRequest
from transduce.service.state import AppState
from transduce.service.validation import AUTO, model_languages, validate_request

router = APIRouter(tags=["files"])


class FileTranslation(BaseModel):
    """Where the translated file can be downloaded (until it expires)."""

    translatedFileUrl: str  # noqa: N815 - LibreTranslate's field name


def _pieces(units: list[str], limit: int) -> list[tuple[int, str]]:
    """(unit index, text) pieces of at most ``limit`` characters: a longer unit is cut between its sentences (each
    piece keeps the whitespace after its sentences, so the translated pieces join back with the same spacing)."""
    pieces: list[tuple[int, str]] = []
    for index, unit in enumerate(units):
        if len(unit) <= limit:
            pieces.append((index, unit))
            continue
        item, part = segment(unit), item_leading(unit)
        for sentence, sep in zip(item.sentences, item.separators, strict=True):
            if part.strip() and len(part) + len(sentence) + len(sep) > limit:
                pieces.append((index, part))
                part = ""
            part += sentence + sep
        pieces.append((index, part))
    return pieces


def item_leading(text: str) -> str:
    """The whitespace a text starts with."""
    return text[: len(text) - len(text.lstrip())]


async def translate_units(units: list[str], source: str, target: str, state: AppState) -> list[str]:
    """Every unit translated through validation and the queue, in order, in requests within max_items/max_chars."""
    settings, pipeline = state.settings, get_pipeline(state)
    detector = await get_detector(model_languages(pipeline.translator)) if source == AUTO else None
    pieces = _pieces(units, settings.max_chars)
    out = [""] * len(units)
    start = 0
    while start < len(pieces):
        end, size = start, 0
        while (
            end < len(pieces) and end - start < settings.max_items and size + len(pieces[end][1]) <= settings.max_chars
        ):
            size += len(pieces[end][1])
            end += 1
        end = max(end, start + 1)  # a piece alone over max_chars is refused by validation with its 413
        request = TranslateRequest(q=[text for _, text in pieces[start:end]], source=source, target=target)
        job = validate_request(request, settings, pipeline.translator, detector)
        results, _ = await pipeline.translate(job, started=time.monotonic())
        for (index, _), result in zip(pieces[start:end], results, strict=True):
            out[index] += result.text
        start = end
    return out


@router.post(
    "/translate_file",
    response_model=FileTranslation,
    responses={code: ERROR_RESPONSES[code] for code in (400, 401, 403, 413, 415, 422, 503, 504)},
    summary="Translate a file (LibreTranslate-compatible): .txt, .md, .docx",
)
async def translate_file(request: Request, state: StateDep) -> FileTranslation:
    """Multipart ``file``, ``source`` (or ``auto``), ``target``, optional ``api_key``; answers where to download it."""
    settings = state.settings
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > settings.max_file_bytes + 65536:
        raise ApiError(
            413, f"upload ({length} bytes) exceeds the limit of {settings.max_file_bytes} bytes (max_file_bytes)"
        )
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
        raise ApiError(415, "send the file as multipart/form-data with the fields file, source and target")
    try:
        form = await request.form(max_files=1, max_fields=8)
    except Exception as exc:  # noqa: BLE001 - the multipart parser raises several types
        raise ApiError(422, f"the multipart body cannot be read ({type(exc).__name__})") from None
    upload, source, target = form.get("file"), form.get("source"), form.get("target")
    key = form.get("api_key")
    check_api_key(state, request, key if isinstance(key, str) else None)
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise ApiError(422, "file: send the file to translate as the multipart field 'file'")
    if not isinstance(source, str) or not isinstance(target, str) or not source or not target:
        raise ApiError(422, "source and target: name both languages (source may be 'auto')")
    data = await upload.read(settings.max_file_bytes + 1)
    if len(data) > settings.max_file_bytes:
        raise ApiError(413, f"{upload.filename} exceeds the limit of {settings.max_file_bytes} bytes (max_file_bytes)")
    document = read_document(upload.filename, data)
    chars = sum(len(u) for u in document.units)
    if chars > settings.max_file_chars:
        raise ApiError(
            413,
            f"{upload.filename} has {chars} characters of text, over the limit of "
            f"{settings.max_file_chars} (max_file_chars): split it",
        )
    translated = document.rebuild(await translate_units(document.units, source, target, state))
    name = PurePath(upload.filename)
    file_id, stored = state.files.save(f"{name.stem}.{target}{name.suffix}", translated)
    return FileTranslation(translatedFileUrl=f"{str(request.base_url).rstrip('/')}/download_file/{file_id}/{stored}")


@router.get("/download_file/{file_id}/{name}", responses={404: ERROR_RESPONSES[404]})
async def download_file(file_id: str, name: str, state: StateDep) -> FileResponse:
    """A translated file, until ``file_ttl_s`` after it was made."""
    path = state.files.find(file_id, name)
    if path is None:
        raise ApiError(404, f"no such file: translated files are kept for {state.settings.file_ttl_s:g} s")
    return FileResponse(
        path, media_type=MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream"), filename=name
    )
