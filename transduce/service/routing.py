"""Translation across several models: each text goes to the model that translates its pair, or through English.

``RoutedPipeline`` is the pipeline of a server with ``TRANSDUCE_MODELS``: a validated job is split by source language
(a list under ``source: "auto"`` may mix them), each part goes to its route's model(s) (loaded on first use, held
until the part is done), and the parts come back in order. A pair no model translates but that ``source -> en`` and
``en -> target`` models cover is translated in two stages, sentence by sentence: the first stage's best hypothesis
only (``alternatives`` never multiply across stages) is the second stage's source, and the item is put back
together (its whitespace, markup and glossary terms) from the second stage's hypotheses. An English sentence longer
than the second model takes is cut at clause marks or spaces (never truncated).

``RoutingTranslator`` is what validation, /languages, /detect and /translate_file see: every pair served, directly or
through English, and token counts by the tokenizer of the model a pair is routed to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from transduce.engine.errors import UnsupportedLanguageError
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.engine.text import split_long
from transduce.service.model_metrics import ModelMetrics
from transduce.service.models import ModelPool, ModelUnavailableError
from transduce.service.observability import RequestTiming
from transduce.service.pipeline import ItemTranslation, PipelineGauges, TranslationPipeline, together
from transduce.service.registry import PIVOT, Pair, Route
from transduce.service.validation import Item, TranslationJob


@dataclass(frozen=True)
class _Text:
    """A text already cut into the sentences a stage translates; its translation is theirs joined by spaces."""

    sentences: tuple[str, ...]

    def rejoin(self, translations: Sequence[str]) -> str:
        return " ".join(translations)


def _hypothesis(item: ItemTranslation, k: int) -> str:
    ranked = [item.text, *item.alternatives]
    return ranked[min(k, len(ranked) - 1)]


def _part(job: TranslationJob, indices: list[int]) -> TranslationJob:
    """The items of ``job`` at ``indices``, as a job of their own."""
    return replace(
        job,
        sources=tuple(job.sources[i] for i in indices),
        items=tuple(job.items[i] for i in indices),
        tokens=tuple(job.tokens[i] for i in indices),
        detected=None,
        texts=tuple(job.texts[i] for i in indices) if job.texts else (),
    )


def _stage_job(
    texts: Sequence[Item], source: str, target: str, like: TranslationJob, n: int, count: Callable[[str], int]
) -> TranslationJob:
    return TranslationJob(
        sources=(source,) * len(texts),
        target=target,
        items=tuple(texts),
        tokens=tuple(tuple(count(s) for s in t.sentences) for t in texts),
        beam_size=like.beam_size,
        num_hypotheses=n,
        as_list=True,
        n_chars=sum(len(s) for t in texts for s in t.sentences),
    )


class RoutingTranslator:
    """The ``TranslatorLike`` face of a model pool (its ``translate`` is never called: ``RoutedPipeline`` routes)."""

    def __init__(self, pool: ModelPool) -> None:
        self.pool = pool

    @property
    def model_name(self) -> str:
        """The served models' names."""
        return ", ".join(self.pool.entries) or "no models"

    @property
    def provider(self) -> str:
        """The execution provider of the loaded models ("none loaded" before the first load)."""
        providers = sorted({e.translator.provider for e in self.pool.loaded() if e.translator is not None})
        return ", ".join(providers) or "none loaded"

    @property
    def pairs(self) -> list[Pair]:
        """Every pair served, directly or through English."""
        return self.pool.routes.pairs

    @property
    def pivot_pairs(self) -> frozenset[Pair]:
        """The pairs served only through English."""
        return self.pool.routes.pivots

    @property
    def max_source_tokens(self) -> int:
        """The largest limit of the served models: what a text passed through unchanged (already in the target
        language) is held to; a pair's own model limit applies to the texts it translates (``counter_for``)."""
        limits = [e.max_source_tokens for e in self.pool.entries.values() if e.state != "failed"]
        return max(limits, default=0)

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        """UnsupportedLanguageError naming the served pairs and pivots unless the pair is served."""
        if self.pool.route(source_lang, target_lang) is None:
            raise UnsupportedLanguageError(self.pool.unsupported(source_lang, target_lang))

    def count_tokens(self, text: str) -> int:
        """The most tokens any loaded model (else the first servable one) counts for ``text``: an upper bound, for
        callers that do not say the pair (cutting a file into pieces, in a thread: the pool's entries are copied at
        once, as the event loop may change them)."""
        entries = self.pool.loaded() or [e for e in list(self.pool.entries.values()) if e.state != "failed"][:1]
        return max((e.count_tokens(text) for e in entries), default=len(text.split()) + 2)

    def counter_for(self, source: str, target: str) -> tuple[Callable[[str], int], int]:
        """How the model a pair is routed to (its first stage) counts a sentence, and its limit."""
        route = self.pool.route(source, target)
        entry = self.pool.entries.get(route.stages[0].model) if route is not None else None
        if entry is None:
            return self.count_tokens, self.max_source_tokens
        return entry.count_tokens, entry.max_source_tokens

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        """Not used: a request goes through ``RoutedPipeline.translate``."""
        raise NotImplementedError("requests to several models are routed by RoutedPipeline.translate")


class RoutedPipeline:
    """The pipeline of a server with several models (see the module's docstring)."""

    def __init__(self, pool: ModelPool, model_metrics: ModelMetrics) -> None:
        self.pool, self.model_metrics = pool, model_metrics
        self.translator = RoutingTranslator(pool)

    async def translate(self, job: TranslationJob, *, started: float) -> tuple[list[ItemTranslation], RequestTiming]:
        """Every item of ``job`` translated by its route; items already in the target language come back as they
        are; one part per source language, run concurrently."""
        groups: dict[str, list[int]] = {}
        for i, source in enumerate(job.sources):
            groups.setdefault(source, []).append(i)
        answers = await together([self._part(source, _part(job, idx), started) for source, idx in groups.items()])
        out: list[ItemTranslation | None] = [None] * len(job.items)
        queue_ms = inference_ms = 0.0
        for indices, (items, timing) in zip(groups.values(), answers, strict=True):
            for i, item in zip(indices, items, strict=True):
                out[i] = item
            queue_ms, inference_ms = queue_ms + timing.queue_ms, inference_ms + timing.inference_ms
        done = [item for item in out if item is not None]
        assert len(done) == len(out), "a routed part returned too few items"
        return done, RequestTiming((time.monotonic() - started) * 1000, queue_ms, inference_ms)

    async def _part(
        self, source: str, job: TranslationJob, started: float
    ) -> tuple[list[ItemTranslation], RequestTiming]:
        if source == job.target:  # named or detected as the target language: sent back as it is
            same = [job.passed(i) or "" for i in range(len(job.items))]
            return [ItemTranslation(text, []) for text in same], RequestTiming(0.0, 0.0, 0.0)
        deadline = started + self.pool.settings.request_timeout_s  # a cold model's load counts, as queueing does
        for _ in range(len(self.pool.entries) + 1):  # a model that fails to load is routed around, if it can be
            route = self.pool.route(source, job.target)
            if route is None:
                break
            try:
                async with self.pool.use(route.models, deadline=deadline) as pipelines:
                    if route.pivot is None:
                        return await self._stage(route.models[0], pipelines[0], job, started)
                    return await self._pivot(route, pipelines, job, started)
            except ModelUnavailableError:
                continue
        raise UnsupportedLanguageError(self.pool.unsupported(source, job.target))

    async def _stage(
        self, model: str, pipeline: TranslationPipeline, job: TranslationJob, started: float
    ) -> tuple[list[ItemTranslation], RequestTiming]:
        begun, ok = time.monotonic(), False
        try:
            answer = await pipeline.translate(job, started=started)
            ok = True
            return answer
        finally:
            self.model_metrics.request(model, time.monotonic() - begun, ok)

    async def _pivot(
        self, route: Route, pipelines: list[TranslationPipeline], job: TranslationJob, started: float
    ) -> tuple[list[ItemTranslation], RequestTiming]:
        """Two stages, sentence by sentence: the best English of each, then the target's n-best of that English."""
        (first, second), (into, out_of) = route.stages, pipelines
        sentences = [_Text((s,)) for item in job.items for s in item.sentences]
        english, timing1 = await self._stage(
            first.model, into, _stage_job(sentences, first.source, PIVOT, job, 1, into.translator.count_tokens), started
        )
        count, limit = out_of.translator.count_tokens, out_of.translator.max_source_tokens
        middle = [
            _Text(tuple(p.strip() for p in split_long(e.text.strip(), lambda t: count(t) <= limit) if p.strip()))
            for e in english
        ]
        results, timing2 = await self._stage(
            second.model, out_of, _stage_job(middle, PIVOT, job.target, job, job.num_hypotheses, count), started
        )
        self.model_metrics.pivots.inc(len(job.items))
        out: list[ItemTranslation] = []
        cursor = 0
        for item in job.items:
            mine = results[cursor : cursor + len(item.sentences)]
            cursor += len(item.sentences)
            ranked = [item.rejoin([_hypothesis(r, k) for r in mine]) for k in range(job.num_hypotheses)]
            out.append(ItemTranslation.ranked(ranked, PIVOT))
        queue_ms = timing1.queue_ms + max(0.0, timing2.queue_ms - timing1.total_ms)
        return out, RequestTiming(timing2.total_ms, queue_ms, timing1.inference_ms + timing2.inference_ms)

    def retry_after(self) -> int:
        """The longest wait any loaded model's queue suggests."""
        return max((e.pipeline.retry_after() for e in self.pool.loaded() if e.pipeline is not None), default=1)

    def gauges(self) -> PipelineGauges:
        """The loaded models' gauges, summed."""
        return sum((e.pipeline.gauges() for e in self.pool.loaded() if e.pipeline is not None), PipelineGauges())

    def status(self) -> dict[str, Any]:
        """Queue and cache facts summed over the loaded models, and each model's own."""
        loaded = {e.spec.name: e.pipeline.status() for e in self.pool.loaded() if e.pipeline is not None}
        g = self.gauges()
        cache = {"entries": g.cache_entries, "hits": g.cache_hits, "misses": g.cache_misses}
        return {
            "queue_depth": g.queue_depth,
            "in_flight": sum(s["in_flight"] for s in loaded.values()),
            "scheduler": self.pool.settings.scheduler,
            "cache": {**cache, "hit_ratio": round(g.hit_ratio, 4)},
            "models": loaded,
        }
