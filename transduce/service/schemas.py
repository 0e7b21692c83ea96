"""Request and response bodies (LibreTranslate's shapes, plus beam_size)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from transduce.service.apikeys import MAX_KEY_CHARS

MAX_TERM_CHARS = 200


class GlossaryEntry(BaseModel):
    """One glossary term: ``source`` is found in the text case-insensitively, as whole words, and never translated;
    the translation holds ``target`` in its place, or the source term as written when ``target`` is null."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(
        min_length=1, max_length=MAX_TERM_CHARS, description="term to find (case-insensitive, whole words)"
    )
    target: str | None = Field(
        max_length=MAX_TERM_CHARS, description="term to use in the translation; null keeps the source term as it is"
    )

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        value = value.strip()
        if not any(c.isalnum() for c in value):
            raise ValueError("has no letter or digit: give the word or words to find")
        return value

    @field_validator("target")
    @classmethod
    def _target(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty: give the term to use, or null to keep the source term")
        return value.strip() if value is not None else None


# inline, not a $ref: the request schema is published on its own (routers.translate), without $defs beside it
_GLOSSARY_SCHEMA = {"anyOf": [{"type": "array", "items": GlossaryEntry.model_json_schema()}, {"type": "null"}]}


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
        0, ge=0, strict=True, description="number of alternative translations to return (fewer than beam_size)"
    )
    api_key: str | None = Field(None, max_length=MAX_KEY_CHARS, description="API key when the server requires one")
    beam_size: int | None = Field(  # at most max_beam_size: checked with the settings, naming it
        None, ge=1, strict=True, description="beam size (1 = greedy); server default if unset"
    )
    glossary: Annotated[list[GlossaryEntry] | None, WithJsonSchema(_GLOSSARY_SCHEMA)] = Field(
        None,
        description="terms to translate as given: [{source, target}], target null to keep the source term; they "
        "override the server's glossary file for the same source term",
    )

    @field_validator("format", mode="before")
    @classmethod
    def _unset_format_is_text(cls, value: Any) -> Any:
        """null or "" is text, as LibreTranslate treats a format it was not given."""
        return "text" if value is None or value == "" else value

    @field_validator("alternatives", mode="before")
    @classmethod
    def _unset_alternatives_is_none(cls, value: Any) -> Any:
        """null is none, as for beam_size (null: the server's default)."""
        return 0 if value is None else value


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
    pivot: str | None = Field(
        None, description="the language the text went through (en) when no model translates the pair directly"
    )


class DetectRequest(BaseModel):
    """POST /detect body: JSON or form-encoded, as LibreTranslate clients send it."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{"q": "Wie geht es dir?"}]})

    q: str | list[str] = Field(description="text whose language to detect (a list is detected as one text)")
    api_key: str | None = Field(None, max_length=MAX_KEY_CHARS, description="API key when the server requires one")


class Language(BaseModel):
    """One entry of GET /languages."""

    code: str
    name: str
    targets: list[str]
    pivot_targets: list[str] | None = Field(
        None, description="with several models: the targets reached through English (two models), a subset of targets"
    )


class ErrorResponse(BaseModel):
    """Every error body."""

    error: str


class RetiringVersion(BaseModel):
    """A version of a model that a reload replaced, still finishing the requests that use it."""

    model: str | None = Field(None, description="the name recorded at export")
    version: str = Field(description="its fingerprint")
    memory_mb: float | None = None
    in_flight: int


class ModelHealth(BaseModel):
    """One model of a server with several (TRANSDUCE_MODELS), in GET /health/ready."""

    name: str = Field(description="the model directory's name")
    state: Literal["unloaded", "loading", "ready", "failed", "retiring"] = Field(
        description="retiring: a model a reload removed, still finishing the requests that use it"
    )
    reason: str | None = Field(None, description="why a failed model cannot be served")
    model: str | None = Field(None, description="the name recorded at export")
    version: str = Field(description="fingerprint of the directory's manifest and files (changes when replaced)")
    pairs: list[str]
    memory_mb: float | None = Field(None, description="resident memory the loaded model added (measured)")
    load_ms: float | None = Field(None, description="how long its last load and canary took")
    in_flight: int = Field(description="requests using or waiting for it")
    retiring: list[RetiringVersion] = Field(
        default_factory=list, description="versions a reload replaced that requests still use"
    )


class Health(BaseModel):
    """GET /health and /health/ready."""

    status: str
    model: str | None = None
    provider: str | None = None
    models: list[ModelHealth] | None = None


class ReloadReport(BaseModel):
    """POST /admin/reload: what the scan of the model directories changed (several models), and the key file's
    reading (with one)."""

    added: list[str] = []
    removed: list[str] = []
    replaced: list[str] = []
    retried: list[str] = Field([], description="models that had failed, read again (they load on first use)")
    unchanged: list[str] = []
    failed: dict[str, str] = Field({}, description="models that cannot be served, and why")
    api_keys: dict[str, int] | None = Field(
        None, description="api_keys_file read again: keys accepted now, keys added, removed, limits changed"
    )


ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        400: "bad field, unsupported language pair (or a target source=auto cannot translate into), alternatives not "
        "below beam_size, a glossary over max_glossary_terms or with a source term twice, or over a sentence/item "
        "limit",
        401: "API key missing",
        403: "API key invalid",
        404: "no such file (translated files expire)",
        408: "request body not received in time",
        413: "text or body over the size limit",
        415: "unsupported content type or content encoding",
        422: "malformed body",
        429: "over req_limit requests a minute from this client (Retry-After)",
        503: "queue full (Retry-After) or not ready",
        504: "timed out",
    }.items()
}
