"""Request and response bodies (LibreTranslate's shapes, plus beam_size)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TranslateRequest(BaseModel):
    """POST /translate body: JSON or form-encoded, as LibreTranslate clients send it.

    The numeric fields are strict: a JSON integer, never ``true``, ``"4"`` or ``4.0`` (form bodies, where every
    value is text, write them in decimal digits; the router converts those before validation)."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"examples": [{"q": "Hello world.", "source": "en", "target": "de", "format": "text"}]},
    )

    q: str | list[str] = Field(description="text to translate, or a list of texts")
    source: str = Field(
        min_length=1,
        max_length=32,
        description="source language code (see /languages), or auto to detect the language of each text",
    )
    target: str = Field(min_length=1, max_length=32, description="target language code")
    format: Literal["text", "html"] = Field(
        "text", description="text, or html: the text of an HTML fragment is translated and its markup kept"
    )
    alternatives: int = Field(
        0, ge=0, le=1000, strict=True, description="number of alternative translations to return (fewer than beam_size)"
    )
    api_key: str | None = Field(None, max_length=256, description="API key when the server requires one")
    beam_size: int | None = Field(
        None, ge=1, le=1000, strict=True, description="beam size (1 = greedy); server default if unset"
    )


class DetectedLanguage(BaseModel):
    """A language detected in a text (LibreTranslate's shape): a code from /languages and how sure detection is,
    0 (no evidence: a guess) to 100."""

    language: str
    confidence: float = Field(ge=0, le=100)


class TranslateResponse(BaseModel):
    """``translatedText`` is a list when ``q`` was a list; so is ``detectedLanguage`` (only with source=auto)."""

    translatedText: str | list[str]  # noqa: N815 - LibreTranslate's field name
    alternatives: list[str] | list[list[str]] | None = None
    detectedLanguage: DetectedLanguage | list[DetectedLanguage] | None = None  # noqa: N815 - LibreTranslate's name


class DetectRequest(BaseModel):
    """POST /detect body: JSON or form-encoded, as LibreTranslate clients send it."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{"q": "Wie geht es dir?"}]})

    q: str | list[str] = Field(description="text whose language to detect (a list is detected as one text)")
    api_key: str | None = Field(None, max_length=256, description="API key when the server requires one")


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
    for code, text in {
        400: "bad field, unsupported language pair (or a target source=auto cannot translate into), alternatives not "
        "below beam_size, or over a sentence/item limit",
        401: "API key missing",
        403: "API key invalid",
        404: "no such file (translated files expire)",
        408: "request body not received in time",
        413: "text or body over the size limit",
        415: "unsupported content type or content encoding",
        422: "malformed body",
        503: "queue full (Retry-After) or not ready",
        504: "timed out",
    }.items()
}
