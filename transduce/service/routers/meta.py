"""GET /languages (LibreTranslate's shape)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from transduce.service.deps import StateDep
from transduce.service.errors import ApiError
from transduce.service.schemas import ERROR_RESPONSES, Language

router = APIRouter(tags=["meta"])

LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "ru": "Russian",
    "zh": "Chinese",
    "ja": "Japanese",
    "ar": "Arabic",
    "pl": "Polish",
    "sv": "Swedish",
    "cs": "Czech",
    "tr": "Turkish",
}


@router.get(
    "/languages", response_model=list[Language], response_model_exclude_none=True, responses={503: ERROR_RESPONSES[503]}
)
async def languages(state: StateDep) -> list[Language]:
    """Every language the model reads or writes, each with the languages it can translate it into (with several
    models: directly or through English, the latter also listed in ``pivot_targets``); one that is only written has
    no targets (it was left out, so a client that checks its target against the codes listed refused it)."""
    if state.pipeline is None or (state.pool is not None and not state.pool.scanned):
        raise ApiError(503, "model is still loading", {"Retry-After": "2"})
    pairs = state.pipeline.translator.pairs
    pivots = state.pool.routes.pivots if state.pool is not None else None
    sources = sorted({code for pair in pairs for code in pair})
    return [
        Language(
            code=s,
            name=LANGUAGE_NAMES.get(s, s),
            targets=sorted(t for a, t in pairs if a == s),
            pivot_targets=sorted(t for a, t in pivots if a == s) if pivots is not None else None,
        )
        for s in sources
    ]


@router.post("/suggest", status_code=403, responses={403: ERROR_RESPONSES[403]})
async def suggest() -> None:
    """LibreTranslate's suggestions (a user's better translation, kept for training): this server keeps none, and
    answers as LibreTranslate does with them off (it was a 404, which clients read as a wrong URL)."""
    raise ApiError(403, "suggestions are disabled on this server")


@router.get("/spec", include_in_schema=False)
async def spec(request: Request) -> dict[str, Any]:
    """The API's description where LibreTranslate serves its own (OpenAPI 3, as at /openapi.json)."""
    return request.app.openapi()
