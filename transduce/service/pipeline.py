"""From a validated job to the sentence queue and back: one submit per request, translations re-joined per item.

The queue is the engine's step scheduler (``scheduler=step``: sentences join the running batch between decoder
steps) or request-level batching (``scheduler=static``: a batch runs to completion, each request answered as soon as
its own sentences are done; for translators without step-level decoding too, such as the tests' fake).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import astuple, dataclass
from typing import Any, Protocol, TypeVar

from transduce.engine.batcher import BatcherConfig, BatchStats, Delivery, DynamicBatcher
from transduce.engine.errors import RequestTooLargeError
from transduce.engine.options import DecodeOptions, SchedulerConfig, sentence_cost
from transduce.engine.results import TranslationResult, filled
from transduce.engine.scheduler import StepScheduler, StepStats, Timed
from transduce.engine.text import has_letters
from transduce.engine.translator import Translator
from transduce.service.cache import TranslationCache
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorLike
from transduce.service.errors import ApiError
from transduce.service.observability import LatencyWindow, Metrics, RequestTiming
from transduce.service.placeholders import plain_retry
from transduce.service.schemas import TranslateRequest
from transduce.service.validation import TranslationJob, validate_request

log = logging.getLogger("transduce.service")


class SentenceQueue(Protocol):
    """What the pipeline submits sentences to (StepScheduler, or StaticBatching below)."""

    @property
    def queue_depth(self) -> int: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def workers(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self, *, drain: bool = True, timeout: float | None = None) -> None: ...

    async def submit(
        self,
        texts: Sequence[str],
        *,
        source_lang: str,
        target_lang: str,
        options: DecodeOptions,
        deadline: float | None = None,
    ) -> list[Timed]: ...


Key = tuple[str, str, DecodeOptions]  # what may share a static batch
T = TypeVar("T")


class StaticBatching:
    """Request-level batching: sentences of concurrent requests with equal options form a batch that runs to
    completion in one ``translate`` call (the DynamicBatcher), requests taking turns by cost (fair queueing, see
    ``DynamicBatcher._in_turns``); the cost of a sentence is its source tokens times the beam size."""

    def __init__(
        self, translator: TranslatorLike, config: BatcherConfig, on_batch: Callable[[BatchStats], None]
    ) -> None:
        self.translator = translator
        self.batcher: DynamicBatcher[Key, tuple[str, int], Timed] = DynamicBatcher(
            self._process, config, cost=lambda item: item[1], on_batch=on_batch
        )

    @property
    def queue_depth(self) -> int:
        """Sentences waiting for a batch."""
        return self.batcher.queue_depth

    @property
    def in_flight(self) -> int:
        """Sentences in the batches now running."""
        return self.batcher.in_flight

    @property
    def workers(self) -> int:
        """Batches that run at once (one per engine replica)."""
        return self.batcher.config.workers

    @property
    def closed(self) -> bool:
        """True once stop() began."""
        return self.batcher.closed

    async def start(self) -> None:
        """Start the batcher."""
        await self.batcher.start()

    async def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stop the batcher (see DynamicBatcher.stop)."""
        await self.batcher.stop(drain=drain, timeout=timeout)

    async def submit(
        self,
        texts: Sequence[str],
        *,
        source_lang: str,
        target_lang: str,
        options: DecodeOptions,
        deadline: float | None = None,
    ) -> list[Timed]:
        """Queue the sentences; they are batched with other requests' sentences of the same pair and options."""
        # the step scheduler's measure of cost too: a batch of long beam-8 sentences is short enough for others to get
        # their turn soon
        items = [(text, sentence_cost(self.translator.count_tokens(text), options)) for text in texts]
        return await self.batcher.submit((source_lang, target_lang, options), items, deadline=deadline)

    def _process(
        self, key: Key, items: list[tuple[str, int]], deliver: Delivery[Key, tuple[str, int], Timed]
    ) -> list[Timed]:
        """Runs in the batcher's worker thread: one engine call for sentences sharing ``key``. The engine's
        Translator hands each sentence over as it finishes, so a request is answered when its own sentences are
        done, not when the longest sentence of its batch is."""
        source, target, options = key
        started = time.monotonic()
        early: dict[str, Any] = {}  # a translator without early results (the tests' fakes): all at the batch's end
        if isinstance(self.translator, Translator):
            early["on_result"] = lambda i, r: deliver(i, Timed(r, started, time.monotonic()))
            early["dropped"] = deliver.abandoned  # a client gone or a deadline passed: its sentences leave the batch
        texts = [t for t, _ in items]
        results = self.translator.translate(texts, source_lang=source, target_lang=target, options=options, **early)
        finished = time.monotonic()
        return [Timed(r, started, finished) for r in results]


@dataclass(frozen=True)
class ItemTranslation:
    """One q entry translated: the best text and the alternatives (and the language it went through, if any)."""

    text: str
    alternatives: list[str]
    pivot: str | None = None

    @classmethod
    def ranked(cls, texts: Sequence[str], pivot: str | None = None) -> ItemTranslation:
        """The best of ``texts`` (best first) and, as alternatives, the others that read differently from it and
        from each other, blanks left out, as LibreTranslate answers: n-best lists of different pieces often
        detokenize alike, and a text passed through has no other reading (so there may be fewer than asked for)."""
        best, others = texts[0], dict.fromkeys(texts[1:])  # in order, once each
        return cls(best, [t for t in others if t not in (best, "")], pivot)


@dataclass(frozen=True)
class PipelineGauges:
    """What the /metrics gauges read from the pipelines at scrape time (summed over a server's models)."""

    queue_depth: int = 0
    cache_entries: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    source_tokens: int = 0
    padded_source_tokens: int = 0

    def __add__(self, other: PipelineGauges) -> PipelineGauges:
        return PipelineGauges(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def hit_ratio(self) -> float:
        """Cache hits over lookups (0 before the first lookup)."""
        lookups = self.cache_hits + self.cache_misses
        return self.cache_hits / lookups if lookups else 0.0

    @property
    def padding_ratio(self) -> float:
        """Share of padded source positions in engine batches (0 before the first batch)."""
        if not self.padded_source_tokens:
            return 0.0
        return 1.0 - self.source_tokens / self.padded_source_tokens


class PipelineLike(Protocol):
    """What the routes use of a pipeline: ``TranslationPipeline`` (one model) or ``RoutedPipeline`` (several)."""

    @property
    def translator(self) -> TranslatorLike: ...

    async def translate(
        self, job: TranslationJob, *, started: float
    ) -> tuple[list[ItemTranslation], RequestTiming]: ...

    def retry_after(self) -> int: ...

    def status(self) -> dict[str, Any]: ...

    def gauges(self) -> PipelineGauges: ...


class TranslationPipeline:
    """Owns the sentence queue of one model."""

    def __init__(self, translator: TranslatorLike, settings: Settings, metrics: Metrics, window: LatencyWindow) -> None:
        self.translator, self.settings, self.metrics, self.window = translator, settings, metrics, window
        self.cache = TranslationCache(settings.cache_size)
        self.queue: SentenceQueue
        if settings.scheduler == "step":
            if not isinstance(translator, Translator):
                raise ValueError("scheduler=step needs the engine's Translator; use scheduler=static with this one")
            config = SchedulerConfig(
                max_batch_size=settings.max_batch_size,
                max_tokens_in_flight=settings.max_tokens_in_flight,
                max_queue_items=settings.max_queue_items,
            )
            self.queue = StepScheduler(translator, config, on_step=self._on_step)
        else:
            batcher = BatcherConfig(
                max_batch_size=settings.max_batch_size,
                max_batch_tokens=settings.max_batch_tokens,
                max_wait_ms=settings.max_wait_ms,
                max_queue_items=settings.max_queue_items,
                # one process() call per engine replica the translator opened (auto picks their number)
                workers=len(translator.runners)
                if isinstance(translator, Translator)
                else settings.engine_replicas or 1,
            )
            self.queue = StaticBatching(translator, batcher, self._on_batch)

    def _on_batch(self, stats: BatchStats) -> None:
        self._record(stats.size, stats.inference_ms, stats.size - stats.abandoned, stats.queue_wait_ms, stats.ok)

    def _on_step(self, stats: StepStats) -> None:
        self._record(stats.active, stats.step_ms, stats.finished, stats.queue_wait_ms, stats.ok)

    def _record(self, size: int, ms: float, finished: int, waits: list[float], ok: bool) -> None:
        self.metrics.batch_size.observe(size)
        self.metrics.inference_seconds.observe(ms / 1000)
        for wait in waits:
            self.metrics.queue_seconds.observe(wait / 1000)
        if not ok:
            self.metrics.batch_failures.inc()
        self.window.add_batch(size, ms, finished)

    async def translate(self, job: TranslationJob, *, started: float) -> tuple[list[ItemTranslation], RequestTiming]:
        """Translate every item of ``job``: cached sentences from the cache, all others queued (one submit per source
        language); a sentence already in the target language (source=auto) comes back as it is."""
        flat = job.sentences
        options = DecodeOptions(
            beam_size=job.beam_size,
            num_hypotheses=job.num_hypotheses,
            chunk_size=self.settings.max_batch_size,
            max_length_ratio=self.settings.max_length_ratio,
            extra_decoding_length=self.settings.extra_decoding_length,
            no_repeat_ngram_size=self.settings.no_repeat_ngram_size,
        )
        keys = [(source, job.target, options, text) for source, text, _ in flat]
        results: list[TranslationResult | None] = []
        lookups = 0
        for (source, text, _), key in zip(flat, keys, strict=True):
            passed = source == job.target or not has_letters(text)  # nothing to translate: given back as it is
            results.append(TranslationResult(hypotheses=[text], tokens=[]) if passed else self.cache.get(key))
            lookups += not passed
        missing = [i for i, r in enumerate(results) if r is None]
        if self.cache.size:
            self.metrics.cache_hits.inc(lookups - len(missing))
            self.metrics.cache_misses.inc(len(missing))
        timed = await self._submit(job.target, [flat[i][:2] for i in missing], options, started) if missing else []
        for i, t in zip(missing, timed, strict=True):
            results[i] = t.result
            self.cache.put(keys[i], t.result)
        self.metrics.sentences.inc(len(timed))
        self.metrics.generated_tokens.inc(sum(len(t.result.tokens[0]) + 1 for t in timed if t.result.tokens))
        done = filled(results)
        retry = [  # placeholders and no word back: the sentence once more without them (its markup then placed)
            (i, plain)
            for i, ((source, text, _), r) in enumerate(zip(flat, done, strict=True))
            if source != job.target and (plain := plain_retry(text, r.hypotheses[0])) is not None
        ]
        if retry:
            try:
                again = await self._submit(job.target, [(flat[i][0], plain) for i, plain in retry], options, started)
            except Exception as exc:  # noqa: BLE001 - a second try only: without it the sentence is kept as sent
                log.info("a retry of %d sentences without placeholders failed: %s", len(retry), exc)
                again = []
            for (i, _), t in zip(retry, again, strict=False):
                done[i] = t.result
                self.cache.put(keys[i], t.result)
            self.metrics.sentences.inc(len(again))
            timed += again
        out: list[ItemTranslation] = []
        cursor = 0
        for index, item in enumerate(job.items):
            mine = done[cursor : cursor + len(item.sentences)]
            cursor += len(item.sentences)
            if (same := job.passed(index)) is not None:  # the text as sent, not its markup re-serialised
                out.append(ItemTranslation(same, []))
                continue
            ranked = [
                item.rejoin([r.hypotheses[min(k, len(r.hypotheses) - 1)] for r in mine])
                for k in range(job.num_hypotheses)
            ]
            out.append(ItemTranslation.ranked(ranked))
        first = min((t.started for t in timed), default=started)
        last = max((t.finished for t in timed), default=first)
        timing = RequestTiming(
            (time.monotonic() - started) * 1000, max(first - started, 0.0) * 1000, (last - first) * 1000
        )
        return out, timing

    async def _submit(
        self, target: str, sentences: list[tuple[str, str]], options: DecodeOptions, started: float
    ) -> list[Timed]:
        """Queue (source, sentence) pairs: one submit per source language, run together; results in input order.

        With several languages the request's size is checked as a whole first, as one submit would check it."""
        groups: dict[str, list[int]] = {}
        for i, (source, _) in enumerate(sentences):
            groups.setdefault(source, []).append(i)
        limit = self.settings.max_queue_items
        if len(groups) > 1 and len(sentences) > limit:
            raise RequestTooLargeError(len(sentences), limit)
        deadline = started + self.settings.request_timeout_s
        answers = await together(
            [
                self.queue.submit(
                    [sentences[i][1] for i in indices],
                    source_lang=source,
                    target_lang=target,
                    options=options,
                    deadline=deadline,
                )
                for source, indices in groups.items()
            ]
        )
        by_index = {
            i: t
            for indices, timed in zip(groups.values(), answers, strict=True)
            for i, t in zip(indices, timed, strict=True)
        }
        return [by_index[i] for i in range(len(sentences))]

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the sentences queued and decoding over recent throughput (an
        engine's, times the engines decoding at once), at least 1 and at most 60."""
        rate = self.window.items_per_second() * self.queue.workers
        waiting = self.queue.queue_depth + self.queue.in_flight
        return max(1, min(60, int(waiting / rate) + 1)) if rate > 0 else 1

    def gauges(self) -> PipelineGauges:
        """Queue, cache and padding facts for the /metrics gauges."""
        stats = getattr(self.translator, "stats", None)  # the engine's counters (a test's fake has none)
        tokens = (stats.source_tokens, stats.padded_source_tokens) if stats is not None else (0, 0)
        cache = self.cache.stats
        return PipelineGauges(self.queue.queue_depth, len(self.cache), cache.hits, cache.misses, *tokens)

    def status(self) -> dict[str, Any]:
        """Queue facts for readiness/debugging."""
        stats = self.cache.stats
        cache = {"entries": len(self.cache), "capacity": self.cache.size, "hits": stats.hits, "misses": stats.misses}
        return {
            "queue_depth": self.queue.queue_depth,
            "in_flight": self.queue.in_flight,
            "scheduler": self.settings.scheduler,
            "cache": {**cache, "hit_ratio": round(stats.hit_ratio, 4)},
        }


async def run_canary(pipeline: TranslationPipeline, settings: Settings) -> tuple[str, str, str]:
    """Translate ``settings.canary_text`` (greedy) through the pipeline's queue, in the model's first pair from
    English (the default text is English), else its first pair: the model serves only once this worked. Returns the
    source, the target and the translation."""
    source, target, job = _canary_job(settings, pipeline.translator)
    results, _ = await pipeline.translate(job, started=time.monotonic())
    return source, target, results[0].text


def _canary_job(settings: Settings, translator: TranslatorLike) -> tuple[str, str, TranslationJob]:
    pairs = translator.pairs
    source, target = next((pair for pair in pairs if pair[0] == "en"), pairs[0])
    canary = TranslateRequest(q=settings.canary_text, source=source, target=target, beam_size=1)
    return source, target, validate_request(canary, settings, translator)


def canary_problem(settings: Settings, translator: TranslatorLike) -> str | None:
    """Why ``settings.canary_text`` would be refused as a request (over max_sentence_tokens, max_chars, ...), or
    None: ``transduce serve`` says so in one line before it starts."""
    try:
        _canary_job(settings, translator)
    except ApiError as exc:
        return exc.message
    except ValueError as exc:  # the engine's InputTooLongError, UnsupportedLanguageError
        return str(exc)
    return None


async def together(calls: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Await ``calls`` concurrently; when one fails, cancel the others (dropping their queued sentences) and raise
    its error as it is (not an ExceptionGroup, so the service maps it to its status)."""
    if len(calls) == 1:
        return [await calls[0]]
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
