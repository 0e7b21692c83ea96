"""What the engine's public calls take (``Translator.translate``, ``translate_batch``, ``StepScheduler.submit``),
checked once where they are called: a library user's mistake is an error in our words, not a numpy or onnxruntime
traceback from deep in a decode, nor a string translated one character at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np


def texts_given(texts: object) -> list[str]:
    """``texts`` as a list of strings, lone surrogates (invalid Unicode, which the tokenizer cannot take) replaced
    by "?" as the service replaces them. A single string is refused: it would be read as its characters."""
    items = _listed(texts, "texts must be a list of strings", ": pass [text]")
    texts_out: list[str] = []
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not a string")
        texts_out.append(_encodable(text))
    return texts_out


def _listed(value: object, what: str, hint: str = "") -> list[object]:
    """``value``'s items; a TypeError saying ``what`` it must be for a single str or bytes, or a non-sequence."""
    if isinstance(value, str | bytes):
        raise TypeError(f"{what}, not one {type(value).__name__}{hint}")
    try:
        return list(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{what}, got {type(value).__name__}") from None


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def ids_given(source: object, vocab_size: int) -> list[Sequence[int]]:
    """``source`` as sequences of token ids, each a whole number within the vocabulary (a negative one indexed from
    its end, one past it failed inside onnxruntime, a float was truncated)."""
    items = _listed(source, "source must be a list of token id sequences")
    for i, seq in enumerate(items):
        ids = np.asarray(seq) if not isinstance(seq, str | bytes) else np.asarray([])
        if isinstance(seq, str | bytes) or ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"source[{i}] must be a sequence of whole-number token ids, got {seq!r:.80}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"source[{i}] holds token id {bad}, outside the vocabulary (0 to {vocab_size - 1})")
    return cast(list[Sequence[int]], items)
