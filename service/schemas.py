"""Request and response bodies (LibreTranslate's shapes, plus beam_size)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TranslateRequest(BaseModel):
    """POST /translate body: JSON or form-encoded, as LibreTranslate clients send it."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={
        "examples": [{"q": "Hello world.", "source": "en", "target": "de", "format": "text"}]})

    q: str | list[str] = Field(description="text to translate, or a list of texts")
    source: str = Field(min_length=1, max_length=32, description="source language code (see /languages)")
    target: str = Field(min_length=1, max_length=32, description="target language code")
    format: Literal["text", "html"] = Field("text", description="text (html is refused with 400 for now)")
    alternatives: int = Field(0, ge=0, le=1000, description="number of alternative translations to return")
    api_key: str | None = Field(None, max_length=256, description="API key when the server requires one")
    beam_size: int | None = Field(None, ge=1, le=1000, description="beam size (1 = greedy); server default if unset")


class TranslateResponse(BaseModel):
    """``translatedText`` is a list when ``q`` was a list."""

    translatedText: str | list[str]  # noqa: N815 - LibreTranslate's field name
    alternatives: list[str] | list[list[str]] | None = None


class Language(BaseModel):
    """One entry of GET /languages."""

    code: str
    name: str
    targets: list[str]


class ErrorResponse(BaseModel):
    """Every error body."""

    error: str


class Health(BaseModel):
    """GET /health and /health/ready."""

    status: str
    model: str | None = None
    provider: str | None = None


ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {400: "bad field, unsupported language pair or over a sentence/item limit",
                       401: "API key missing", 403: "API key invalid", 413: "text or body over the size limit",
                       422: "malformed body", 503: "queue full (Retry-After) or not ready", 504: "timed out"}.items()
}
