"""POST /detect: LibreTranslate's language detection (JSON or form ``q``), among the model's languages."""

from __future__ import annotations

from fastapi import APIRouter, Request

from transduce.service.deps import StateDep, accepted_key, get_pipeline, rate_before_body
from transduce.service.detect import detect_order, get_detector
from transduce.service.errors import ApiError
from transduce.service.request_body import read_body_as
from transduce.service.schemas import ERROR_RESPONSES, DetectedLanguage, DetectRequest
from transduce.service.validation import check_counts, clean_text, model_languages

router = APIRouter(tags=["translate"])

_schema = DetectRequest.model_json_schema()
_form_schema = {**_schema, "properties": {**_schema["properties"], "q": {"type": "string"}}}
OPENAPI_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": _schema},
            "application/x-www-form-urlencoded": {"schema": _form_schema},
            "multipart/form-data": {"schema": _form_schema},
        },
    }
}


@router.post(
    "/detect",
    response_model=list[DetectedLanguage],
    responses={code: ERROR_RESPONSES[code] for code in (400, 401, 403, 408, 413, 415, 422, 429, 503)},
    openapi_extra=OPENAPI_BODY,
    summary="Detect the language of a text (LibreTranslate-compatible)",
)
async def detect(request: Request, state: StateDep) -> list[DetectedLanguage]:
    """The model's languages, most likely first, each with a confidence from 0 (no evidence) to 100."""
    rate_before_body(state, request)
    req = await read_body_as(request, state.settings, DetectRequest, "q")
    accepted_key(state, request, req.api_key)
    pipeline = get_pipeline(state)
    texts = [req.q] if isinstance(req.q, str) else req.q
    check_counts(texts, state.settings)  # the limits of /translate, counted as there: the texts as sent
    text = "\n".join(texts)  # a list is detected as one text
    if not text.strip():
        raise ApiError(400, "q is empty: send the text whose language to detect")
    languages = model_languages(pipeline.translator)
    detector = await get_detector(languages)
    ranked = detector.rank(clean_text(text), detect_order(detector.languages))
    if not ranked:
        raise ApiError(400, f"language detection knows none of the model's languages ({', '.join(languages)})")
    return [DetectedLanguage(language=d.language, confidence=d.confidence) for d in ranked]
