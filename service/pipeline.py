"""From request items to batcher submits and back: split into sentences, check limits, submit, re-join."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from engine.batcher import BatcherConfig, BatchStats, DynamicBatcher
from engine.errors import InputTooLongError
from engine.options import DecodeOptions
from engine.text import join_sentences
from engine.translator import TranslationResult
from service.config import Settings
from service.observability import LatencyWindow, Metrics, RequestTiming

Key = tuple[str, str, int, int]  # (source, target, beam_size, num_hypotheses): what may share a batch


class TranslatorLike(Protocol):
    """What the service needs of engine.translator.Translator (tests pass a fake)."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def pairs(self) -> list[tuple[str, str]]: ...

    @property
    def languages(self) -> list[str]: ...

    def check_pair(self, source_lang: str, target_lang: str) -> None: ...

    def split_sentences(self, text: str) -> list[tuple[str, str]]: ...

    def count_tokens(self, text: str) -> int: ...

    def translate(self, texts: list[str], *, source_lang: str, target_lang: str,
                  options: DecodeOptions | None = None) -> list[TranslationResult]: ...


class TooManySentencesError(ValueError):
    """A request with more sentences than the queue can ever hold (the service answers 413)."""


@dataclass(frozen=True)
class Timed:
    """A sentence's result with when its batch started and how long the batch took."""

    result: TranslationResult
    batch_started: float
    batch_ms: float


@dataclass(frozen=True)
class ItemTranslation:
    """One q entry translated: the best text and the alternatives."""

    text: str
    alternatives: list[str]


class TranslationPipeline:
    """Owns the batcher; one instance per app."""

    def __init__(self, translator: TranslatorLike, settings: Settings, metrics: Metrics, window: LatencyWindow) -> None:
        self.translator, self.settings, self.metrics, self.window = translator, settings, metrics, window
        config = BatcherConfig(max_batch_size=settings.max_batch_size, max_batch_tokens=settings.max_batch_tokens,
                               max_wait_ms=settings.max_wait_ms, max_queue_items=settings.max_queue_items)
        self.batcher: DynamicBatcher[Key, tuple[str, int], Timed] = DynamicBatcher(
            self._process, config, cost=lambda item: item[1], on_batch=self._on_batch)
        model_limit = getattr(translator, "max_source_tokens", None)  # the engine fails a whole batch beyond it
        self.model_limit: int | None = model_limit if isinstance(model_limit, int) else None

    def _process(self, key: Key, items: list[tuple[str, int]]) -> list[Timed]:
        """Runs in the batcher's worker thread: one engine call for sentences sharing ``key``."""
        source, target, beam, n_hyps = key
        started = time.monotonic()
        options = DecodeOptions(beam_size=beam, num_hypotheses=n_hyps, max_batch_size=self.settings.max_batch_size)
        results = self.translator.translate([text for text, _ in items], source_lang=source, target_lang=target,
                                            options=options)
        ms = (time.monotonic() - started) * 1000
        self.metrics.generated_tokens.inc(sum(len(r.tokens[0]) + 1 for r in results if r.tokens))
        self.metrics.sentences.inc(len(results))
        return [Timed(r, started, ms) for r in results]

    def _on_batch(self, stats: BatchStats) -> None:
        self.metrics.batch_size.observe(stats.size)
        self.metrics.inference_seconds.observe(stats.inference_ms / 1000)
        for wait in stats.queue_wait_ms:
            self.metrics.queue_seconds.observe(wait / 1000)
        if not stats.ok:
            self.metrics.batch_failures.inc()
        self.window.add_batch(stats)

    def sentences(self, item: str) -> list[tuple[str, str, int]]:
        """(sentence, following whitespace, token count) of one q entry; raises InputTooLongError over the limit."""
        out: list[tuple[str, str, int]] = []
        if not item.strip():
            return out  # blank entries come back as "" without reaching the engine
        for sentence, ws in self.translator.split_sentences(item):
            n = self.translator.count_tokens(sentence)
            if n > self.settings.max_sentence_tokens:
                raise InputTooLongError(f"a sentence has {n} tokens, over the limit of "
                                        f"{self.settings.max_sentence_tokens} (max_sentence_tokens); split it")
            if self.model_limit is not None and n > self.model_limit:
                raise InputTooLongError(f"a sentence has {n} tokens, over the model's limit of {self.model_limit} "
                                        "(its maximum source length; max_sentence_tokens cannot raise it); split it")
            out.append((sentence, ws, n))
        return out

    async def translate(self, items: list[str], *, source: str, target: str, beam_size: int, alternatives: int,
                        started: float) -> tuple[list[ItemTranslation], RequestTiming]:
        """Translate every q entry; all their sentences go to the batcher in one submit."""
        split = [self.sentences(item) for item in items]
        flat = [(sentence, n) for parts in split for sentence, _, n in parts]
        limit = self.settings.max_queue_items
        if len(flat) > limit:
            raise TooManySentencesError(f"request has {len(flat)} sentences, over the limit of {limit} sentences "
                                        "per request (max_queue_items); send it in parts")
        n_hyps = alternatives + 1
        key: Key = (source, target, max(beam_size, n_hyps), n_hyps)
        deadline = started + self.settings.request_timeout_s
        timed = await self.batcher.submit(key, flat, deadline=deadline) if flat else []
        out: list[ItemTranslation] = []
        cursor = 0
        for parts in split:
            results = [t.result for t in timed[cursor : cursor + len(parts)]]
            cursor += len(parts)
            separators = [ws for _, ws, _ in parts]
            ranked = [join_sentences([r.hypotheses[min(k, len(r.hypotheses) - 1)] for r in results], separators)
                      for k in range(n_hyps)]
            out.append(ItemTranslation(ranked[0], ranked[1:]))
        batches = {(t.batch_started, t.batch_ms) for t in timed}
        queue_ms = (min(b for b, _ in batches) - started) * 1000 if batches else 0.0
        timing = RequestTiming((time.monotonic() - started) * 1000, max(queue_ms, 0.0), sum(ms for _, ms in batches))
        return out, timing

    def retry_after(self) -> int:
        """Seconds a refused client should wait: queued sentences over recent throughput, at least 1."""
        rate = self.window.items_per_second()
        return max(1, min(60, int(self.batcher.queue_depth / rate) + 1)) if rate > 0 else 1

    def status(self) -> dict[str, Any]:
        """Queue facts for readiness/debugging."""
        return {"queue_depth": self.batcher.queue_depth, "in_flight": self.batcher.in_flight}
