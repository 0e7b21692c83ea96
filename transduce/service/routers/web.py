"""The web page at / (static HTML/CSS/JS, no build step, no external resources) and its settings endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse

from transduce.service.config import Settings
from transduce.service.deps import StateDep
from transduce.service.documents import supported_types
from transduce.service.routers.meta import LANGUAGE_NAMES

STATIC = Path(__file__).resolve().parents[1] / "static"
router = APIRouter(tags=["web"])


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    """The translation page."""
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> FileResponse:
    """Browsers ask for /favicon.ico whatever the page links: the same icon, instead of a 404 per visit."""
    return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")


@router.get("/frontend/settings")
async def frontend_settings(state: StateDep) -> dict[str, Any]:
    """What the page and `transduce translate --url` need: the request limits (named as the settings are;
    char_limit is max_chars), the file limits and file types, and the model name; and the keys LibreTranslate's
    endpoint has, under its names, for its page and its clients (``charLimit``, ``keyRequired``, ``language`` with
    the languages a page starts with: English, or the first source, into its first target)."""
    translator = state.pipeline.translator if state.pipeline else None
    settings = state.settings
    return {
        **_libretranslate_keys(settings, sorted(translator.pairs) if translator else [], bool(state.keyring)),
        "char_limit": settings.max_chars,
        "max_items": settings.max_items,
        "max_queue_items": settings.max_queue_items,
        "max_sentence_tokens": settings.max_sentence_tokens,
        "max_beam_size": settings.max_beam_size,
        # a beam of k keeps k - 1 alternatives: what a request can really get
        "max_alternatives": min(settings.max_alternatives, settings.max_beam_size - 1),
        "no_repeat_ngram_size": settings.no_repeat_ngram_size,
        "max_file_bytes": settings.max_file_bytes,
        "max_file_chars": settings.max_file_chars,
        "request_timeout_s": settings.request_timeout_s,  # the page waits a margin beyond it, then says so
        "model": translator.model_name if translator else None,
        "provider": translator.provider if translator else None,
        "api_key_required": bool(state.keyring),
    }


def _libretranslate_keys(settings: Settings, pairs: list[tuple[str, str]], keys: bool) -> dict[str, Any]:
    sources = [s for s, _ in pairs]
    source = "en" if "en" in sources else sources[0] if sources else None
    target = next((t for s, t in pairs if s == source), None)
    return {
        "charLimit": settings.max_chars,
        "frontendTimeout": 500,  # LibreTranslate's default: its page's wait after typing (this page waits for a click)
        "apiKeys": keys,
        "keyRequired": keys,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": supported_types(),
        "language": {
            "source": {"code": source, "name": LANGUAGE_NAMES.get(source or "", source)},
            "target": {"code": target, "name": LANGUAGE_NAMES.get(target or "", target)},
        },
    }
