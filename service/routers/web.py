"""The web page at / (static HTML/CSS/JS, no build step, no external resources) and its settings endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse

from service.deps import StateDep

STATIC = Path(__file__).resolve().parents[1] / "static"
router = APIRouter(tags=["web"])


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    """The translation page."""
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/frontend/settings")
async def frontend_settings(state: StateDep) -> dict[str, Any]:
    """What the page needs: the character limit and the model name (like LibreTranslate's endpoint)."""
    translator = state.pipeline.translator if state.pipeline else None
    return {"char_limit": state.settings.max_chars, "model": translator.model_name if translator else None,
            "provider": translator.provider if translator else None, "api_key_required": bool(state.settings.keys)}
