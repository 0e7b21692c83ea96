"""GET /languages (LibreTranslate's shape)."""

from __future__ import annotations

from fastapi import APIRouter

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
    """Languages the model reads, each with the languages it can translate them into (with several models: directly
    or through English, the latter also listed in ``pivot_targets``)."""
    if state.pipeline is None or (state.pool is not None and not state.pool.scanned):
        raise ApiError(503, "model is still loading", {"Retry-After": "2"})
    pairs = state.pipeline.translator.pairs
    pivots = state.pool.routes.pivots if state.pool is not None else None
    sources = sorted({s for s, _ in pairs})
    return [
        Language(
            code=s,
            name=LANGUAGE_NAMES.get(s, s),
            targets=sorted(t for a, t in pairs if a == s),
            pivot_targets=sorted(t for a, t in pivots if a == s) if pivots is not None else None,
        )
        for s in sources
    ]
