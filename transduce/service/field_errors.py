"""What is wrong with a request's fields, in this project's words: never pydantic's or Python's messages.

Every message names the field, what it must be and what was sent (its kind, or the value itself when it is short),
so a client can fix the request without knowing which library parsed it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_core import ErrorDetails

MAX_DIGITS = 18  # a numeric field, or any integer in a JSON body, has at most this many digits
SHOWN_CHARS = 24  # a sent value is quoted back only when it is this short

_RULES = {
    "q": "must be a text or a list of texts",
    "source": "must be a language code such as 'en' (see /languages)",
    "target": "must be a language code such as 'de' (see /languages)",
    "format": "must be 'text' or 'html'",
    "alternatives": "must be a whole number written as a JSON integer, such as 2",
    "beam_size": "must be a whole number written as a JSON integer, such as 4",
    "api_key": "must be a text",
}
_FORM_RULES = {
    "alternatives": "must be a whole number written in decimal digits, such as 2",
    "beam_size": "must be a whole number written in decimal digits, such as 4",
}


HALF_CHARACTERS = "holds half a character (a lone surrogate, such as \\ud800): send whole characters"


def half_characters(value: Any) -> bool:
    """Whether ``value`` is a text with a lone surrogate (which pydantic refuses as a text: said so, not "must be a
    text")."""
    return isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value)


def describe(value: Any) -> str:
    """What a sent value is, in JSON's terms: ``true``, ``null``, ``the text "4"``, ``a list``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"the number {value}" if len(str(abs(value))) <= MAX_DIGITS else "a number with too many digits"
    if isinstance(value, float):
        shown = repr(value)
        if not math.isfinite(value):
            return "a number out of range"
        return f"the number {shown}" if len(shown) <= SHOWN_CHARS else "a number with a fraction"
    if isinstance(value, str):
        return f"the text {json.dumps(value)}" if len(value) <= SHOWN_CHARS else f"a text of {len(value)} characters"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a file" if hasattr(value, "filename") else "a value of another kind"


def _field_problem(field: str, error: ErrorDetails, value: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "missing":
        return f"{field} is required"
    if half_characters(value) and field not in _FORM_RULES:  # a text field (a number field: the wrong kind)
        return f"{field} {HALF_CHARACTERS}"
    if kind in ("greater_than_equal", "less_than_equal"):
        bound = "at least" if kind == "greater_than_equal" else "at most"
        return f"{field} must be {bound} {ctx.get('ge', ctx.get('le'))}, not {describe(value)}"
    if kind in ("string_too_short", "string_too_long"):
        bound, n = (
            ("at least", ctx.get("min_length")) if kind == "string_too_short" else ("at most", ctx.get("max_length"))
        )
        return f"{field} must have {bound} {n} character{'' if n == 1 else 's'}, not {describe(value)}"
    rule = _RULES.get(field, "has a value of the wrong kind")
    if field == "q" and isinstance(value, list):
        bad = next((i for i, item in enumerate(value) if not isinstance(item, str)), None)
        if bad is not None:
            return f"q {rule}: item {bad} is {describe(value[bad])}"
    return f"{field} {rule}, not {describe(value)}"


def validation_message(errors: Sequence[ErrorDetails], data: Mapping[str, Any] | None = None) -> str:
    """One message for a model's validation errors: one problem per field (at most five), in field order.

    ``data`` is what was validated; the value a problem describes is taken from it (a field of a union type such as
    ``q`` gets one error per alternative type, each with only part of the picture)."""
    firsts: dict[str, ErrorDetails] = {}
    for error in errors:
        where = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path", "header")]
        firsts.setdefault(where[0] if where else "body", error)
    data = data or {}
    parts = [
        _field_problem(field, error, data[field] if field in data else error.get("input"))
        for field, error in list(firsts.items())[:5]
    ]
    return "invalid request: " + "; ".join(parts)


def form_number(field: str, raw: str) -> int | None:
    """A numeric field of a form body (where every value is text): decimal digits only; empty means not given.

    Raises ValueError with the message for the client otherwise."""
    if raw == "":
        return None
    if raw.isascii() and raw.isdigit() and len(raw) <= MAX_DIGITS:
        return int(raw)
    raise ValueError(f"invalid request: {field} {_FORM_RULES[field]}, not {describe(raw)}")
