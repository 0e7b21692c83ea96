"""What the engine gives back: a translation's n-best list (``TranslationResult``) and the counters the service
exports as metrics (``EngineStats``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from transduce.engine.options import DecodeOptions


@dataclass(frozen=True)
class TranslationResult:
    """The n-best list of one input, best first; ``scores`` is empty unless ``return_scores`` was set."""

    hypotheses: list[str]
    tokens: list[list[int]]
    scores: list[float] = field(default_factory=list)


@dataclass
class EngineStats:
    """Counters the service exports as metrics; updated under a lock by whoever translates."""

    batches: int = 0
    sentences: int = 0
    source_tokens: int = 0
    padded_source_tokens: int = 0
    generated_tokens: int = 0
    decoder_steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def filled(results: list[TranslationResult | None]) -> list[TranslationResult]:
    """``results`` once every slot holds a result (an empty slot is a bug in the code that filled it: raised, never
    dropped, so results never shift onto the wrong inputs)."""
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"no translation was produced for inputs {missing[:10]}: a decoding loop bug")
    return cast(list[TranslationResult], results)


def passed_through(text: str, options: DecodeOptions) -> TranslationResult:
    """The result of a text translated without decoding (blank, or without a letter: itself, stripped), with lists
    of its own."""
    k = options.num_hypotheses
    return TranslationResult([text.strip()] * k, [[] for _ in range(k)], [0.0] * k if options.return_scores else [])
