"""Step-level (continuous) batching: the sentences of every request queue fairly, join the running batch between
decoder steps, and leave as soon as they finish; a request is answered when its last sentence is done.

One worker thread owns the model. Between two steps it drops cancelled and expired sentences, admits queued ones
round-robin across requests while the batch has room (``max_batch_size`` sentences, ``max_tokens_in_flight`` source
tokens x beam), encodes the newcomers in one pass and merges them into the running batch of their beam width, then
steps every running batch once. Queue errors are the batcher's (``QueueFullError``, ``RequestTooLargeError``,
``DeadlineExceededError``, ``BatcherClosedError``), so the service maps both kinds of queue the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from transduce.engine.batcher import BatcherClosedError, DeadlineExceededError, QueueFullError, RequestTooLargeError
from transduce.engine.denormals import flushing_denormals
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions, SchedulerConfig
from transduce.engine.running import Job, RunningBatch
from transduce.engine.search import Hypothesis
from transduce.engine.translator import TranslationResult, Translator

log = logging.getLogger("transduce.scheduler")


@dataclass(frozen=True)
class Timed:
    """A sentence's result, when it started decoding and when it finished (monotonic seconds); with the step
    scheduler also how many decoder steps ran while it was queued (counted when it entered the queue, under the
    queue's lock, so time the caller spent before that, tokenising or waiting for the interpreter, is not counted)."""

    result: TranslationResult
    started: float
    finished: float
    steps_queued: int = 0


@dataclass(frozen=True)
class StepStats:
    """One step of the running batches, reported to the ``on_step`` hook."""

    active: int  # sentences that decoded in this step
    finished: int  # of them, how many finished
    queue_wait_ms: list[float]  # how long each sentence admitted before this step waited in the queue
    step_ms: float
    ok: bool


@dataclass(eq=False)
class _Slot:
    """Where a job's result goes: its request and position, and when it was queued and admitted."""

    request: _Request
    index: int
    queued: float
    blocked_since: int | None = None  # step count when it first fitted its request's share but not the batch
    admitted: float = 0.0
    queued_step: int = 0  # step counts when it entered the queue and when it was admitted
    admitted_step: int = 0


@dataclass(eq=False)
class _Request:
    """One submit: its queued jobs, results so far, and the future its caller awaits on the event loop."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Timed]]
    size: int
    deadline: float | None
    submitted: float
    pending: deque[Job] = field(default_factory=deque)
    results: list[Timed | None] = field(init=False)
    remaining: int = field(init=False)
    cancelled: bool = False  # set on the event loop (client gone, deadline); read by the worker between steps

    def __post_init__(self) -> None:
        self.results, self.remaining = [None] * self.size, self.size

    def over(self) -> bool:
        """Cancelled, failed, or past its deadline: its sentences should not (go on) decode."""
        return self.cancelled or (self.deadline is not None and time.monotonic() > self.deadline)

    def deliver(self, index: int, timed: Timed) -> None:
        """On the event loop: store one result; the last one completes the future."""
        if self.future.done():
            return
        self.results[index] = timed
        self.remaining -= 1
        if self.remaining == 0:
            missing = [i for i, r in enumerate(self.results) if r is None]
            if missing:  # a sentence delivered twice: a scheduler bug, never a shifted result list
                self.future.set_exception(RuntimeError(f"no translation was delivered for sentences {missing[:10]}"))
            else:
                self.future.set_result(cast(list[Timed], self.results))

    def fail(self, exc: BaseException) -> None:
        """On the event loop: fail the request unless it is already over."""
        if not self.future.done():
            self.future.set_exception(exc)


class StepScheduler:
    """Continuous batching over a ``Translator``: ``await submit(...)`` from the event loop, one worker thread."""

    def __init__(
        self,
        translator: Translator,
        config: SchedulerConfig | None = None,
        *,
        on_step: Callable[[StepStats], None] | None = None,
    ) -> None:
        self.translator, self.config, self.on_step = translator, config or SchedulerConfig(), on_step
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._requests: deque[_Request] = deque()  # requests with queued jobs, in round-robin order
        self._queued = 0
        self._batches: dict[int, RunningBatch] = {}  # by beam width
        self._waits: list[float] = []  # queue waits of the jobs admitted since the last step report
        self._steps = 0  # decoder steps so far
        self._last_join = 0  # the step count at the last join
        self._thread: threading.Thread | None = None
        self._closed = False
        self._abort: BaseException | None = None

    @property
    def queue_depth(self) -> int:
        """Sentences waiting to join."""
        return self._queued

    @property
    def in_flight(self) -> int:
        """Sentences decoding now."""
        return sum(b.sentences for b in list(self._batches.values()))

    @property
    def closed(self) -> bool:
        """True once stop() began (or the worker died)."""
        return self._closed

    async def start(self) -> None:
        """Start the worker thread."""
        if self._thread is not None or self._closed:
            raise RuntimeError("scheduler already started (a StepScheduler cannot be restarted; create a new one)")
        self._thread = threading.Thread(target=self._work, name="transduce-scheduler", daemon=True)
        self._thread.start()

    async def submit(
        self,
        texts: Sequence[str],
        *,
        source_lang: str,
        target_lang: str,
        options: DecodeOptions = DEFAULT_OPTIONS,
        deadline: float | None = None,
    ) -> list[Timed]:
        """Translate sentences (none blank); results in order. Raises the batcher's queue errors."""
        if self._closed:
            raise BatcherClosedError("the scheduler is shutting down and takes no new requests")
        if self._thread is None:
            raise BatcherClosedError("the scheduler is not running yet: call start() first")
        limit = self.config.max_queue_items
        if len(texts) > limit:
            raise RequestTooLargeError(len(texts), limit)
        if not texts:
            return []
        self.translator.check_pair(source_lang, target_lang)
        now = time.monotonic()
        if deadline is not None and deadline <= now:
            raise DeadlineExceededError("the request's deadline passed before it was queued")
        loop = asyncio.get_running_loop()
        request = _Request(loop, loop.create_future(), len(texts), deadline, now)
        tokenizer = self.translator.tokenizer
        for i, text in enumerate(texts):
            slot = _Slot(request, i, now)
            ids = tokenizer.encode_source(text, target_lang)
            request.pending.append(Job(ids, options, self._on_done(slot, options), request.over, tag=slot))
        with self._lock:
            if self._queued + len(texts) > limit:
                raise QueueFullError(
                    f"queue full: {self._queued} of {limit} sentences waiting, no room for {len(texts)}"
                )
            self._requests.append(request)
            self._queued += len(texts)
            for job in request.pending:
                job.tag.queued_step = self._steps
        self._wake.set()
        try:
            if deadline is None:
                return await request.future
            return await asyncio.wait_for(request.future, deadline - time.monotonic())
        except TimeoutError:
            request.cancelled = True  # the worker drops its queued and running sentences at the next step
            self._wake.set()
            raise DeadlineExceededError("the request's deadline passed before it was processed") from None
        except asyncio.CancelledError:
            request.cancelled = True
            self._wake.set()
            raise

    async def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Refuse new work; finish what was accepted (``drain``, bounded by ``timeout``) or fail it; stop the worker."""
        self._closed = True
        if not drain:
            self._abort = BatcherClosedError("the server shut down before this request was processed")
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, timeout)
            if self._thread.is_alive():
                log.warning(
                    "stop(): %d queued and %d running sentences not finished within %s s",
                    self.queue_depth,
                    self.in_flight,
                    timeout,
                )
                self._abort = BatcherClosedError("the scheduler stopped before this request was processed")
                self._wake.set()

    def _on_done(self, slot: _Slot, options: DecodeOptions) -> Callable[[list[Hypothesis]], None]:
        def done(hyps: list[Hypothesis]) -> None:  # in the worker thread
            tok = self.translator.tokenizer
            result = TranslationResult(
                hypotheses=[tok.decode(h.tokens) for h in hyps],
                tokens=[list(h.tokens) for h in hyps],
                scores=[h.score for h in hyps] if options.return_scores else [],
            )
            with self.translator.stats.lock:
                self.translator.stats.generated_tokens += len(hyps[0].tokens) + 1 if hyps else 0
            timed = Timed(result, slot.admitted, time.monotonic(), slot.admitted_step - slot.queued_step)
            _call_soon(slot.request, slot.request.deliver, slot.index, timed)

        return done

    # ---- the worker thread -------------------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            with flushing_denormals():  # the worker only decodes: denormals flushed for its life (engine.denormals)
                while True:
                    if self._abort is not None:
                        self._fail_everything(self._abort)
                        return
                    self._admit()
                    if not self._batches:
                        if self._closed and not self._queued:
                            return
                        self._wake.wait(0.05 if self._queued else None)
                        self._wake.clear()
                        continue
                    self._step()
        except Exception as exc:  # a bug: nobody may wait forever
            log.exception("scheduler worker crashed; refusing new work")
            self._closed = True
            self._fail_everything(exc)

    def _admit(self) -> None:
        """Move queued jobs into the running batches, round-robin across requests, within the limits; one request
        holds at most ``request_share`` of them (or one sentence), so a newcomer finds room at the next step."""
        cfg, now = self.config, time.monotonic()
        held: dict[int, list[int]] = {}  # per request: [sentences, cost] decoding now
        for job in (j for b in self._batches.values() for j in b.live_jobs()):
            mine = held.setdefault(id(job.tag.request), [0, 0])
            mine[0], mine[1] = mine[0] + 1, mine[1] + job.cost
        active, cost = sum(h[0] for h in held.values()), sum(h[1] for h in held.values())
        share_size = max(1, int(cfg.max_batch_size * cfg.request_share))
        share_cost = cfg.max_tokens_in_flight * cfg.request_share

        def fits(job: Job) -> bool:
            return not active or cost + job.cost <= cfg.max_tokens_in_flight

        def fair(request: _Request, job: Job) -> bool:
            mine = held.get(id(request), [0, 0])
            return not mine[0] or (mine[0] < share_size and mine[1] + job.cost <= share_cost)

        admitted: list[Job] = []

        def take(request: _Request) -> None:
            nonlocal active, cost
            job = request.pending.popleft()
            if not request.pending:
                self._requests.remove(request)
            self._queued -= 1
            active, cost = active + 1, cost + job.cost
            mine = held.setdefault(id(request), [0, 0])
            mine[0], mine[1] = mine[0] + 1, mine[1] + job.cost
            admitted.append(job)
            job.tag.admitted, job.tag.admitted_step = now, self._steps
            self._waits.append((now - job.tag.queued) * 1000)

        with self._lock:
            for request in list(self._requests):  # drop what nobody waits for any more
                if request.over() or not request.pending:
                    self._queued -= len(request.pending)
                    request.pending.clear()
                    self._requests.remove(request)
            if not self._requests or not self._may_join(active):
                return
            starved = [
                r
                for r in self._requests
                if r.pending[0].tag.blocked_since is not None
                and self._steps - r.pending[0].tag.blocked_since >= cfg.starve_steps
                and fair(r, r.pending[0])
            ]
            if starved:  # the sentence kept out longest by what others hold goes first, once the batch has room
                oldest = min(starved, key=lambda r: r.pending[0].tag.blocked_since)
                if not fits(oldest.pending[0]):
                    return  # the batch drains until it fits
                take(oldest)
            blocked = 0  # requests in a row that could not take a sentence
            while self._requests and active < cfg.max_batch_size and blocked < len(self._requests):
                request = self._requests[0]
                job = request.pending[0]
                self._requests.rotate(-1)  # the next sentence comes from the next request
                if not (fits(job) and fair(request, job)):
                    if fair(request, job) and job.tag.blocked_since is None:
                        job.tag.blocked_since = self._steps  # within its share, kept out by what others hold
                    blocked += 1
                    continue
                blocked = 0
                take(request)
        if admitted:
            self._last_join = self._steps
        self._join(admitted)

    def _may_join(self, active: int) -> bool:
        """Whether newcomers may join now: the batch has room, and it is empty or lightly used, or the last join
        was ``join_every_steps`` ago (joins in groups keep state copies and search objects few)."""
        cfg = self.config
        free = cfg.max_batch_size - active
        if free <= 0:
            return False
        return not active or free >= cfg.join_free or self._steps - self._last_join >= cfg.join_every_steps

    def _join(self, admitted: list[Job]) -> None:
        """Encode the admitted jobs, one encoder pass per distinct options, into the running batch of their beam
        width; a failure (e.g. out of memory) fails only the requests of that pass."""
        groups: dict[DecodeOptions, list[Job]] = {}
        for job in admitted:
            groups.setdefault(job.options, []).append(job)
        for options, jobs in groups.items():
            beam = options.beam_size
            batch = self._batches.setdefault(beam, RunningBatch(self.translator.runner, self.translator.manifest, beam))
            try:
                real, padded = batch.join(jobs)
            except Exception as exc:
                log.exception("encoding %d joining sentences failed (beam %d)", len(jobs), beam)
                for job in jobs:
                    request = job.tag.request
                    request.cancelled = True  # its other sentences are dropped at the next admission
                    _call_soon(request, request.fail, exc)
                if batch.state is None:
                    del self._batches[beam]
                continue
            with self.translator.stats.lock:
                self.translator.stats.batches += 1
                self.translator.stats.source_tokens += real
                self.translator.stats.padded_source_tokens += padded

    def _step(self) -> None:
        active = sum(b.sentences for b in self._batches.values())
        started, finished, ok = time.monotonic(), 0, True
        for beam, batch in list(self._batches.items()):
            try:
                finished += batch.step()
            except Exception as exc:  # a failed step fails only the requests decoding in that batch
                ok = False
                log.exception("decoder step failed for %d sentences (beam %d)", batch.sentences, beam)
                for job in batch.fail():
                    request = job.tag.request
                    request.cancelled = True
                    _call_soon(request, request.fail, exc)
            if batch.state is None:
                del self._batches[beam]
        self._steps += 1
        waits, self._waits = self._waits, []
        stats = self.translator.stats
        with stats.lock:
            stats.decoder_steps += 1
            stats.sentences += finished
        if self.on_step is not None:
            try:
                self.on_step(StepStats(active, finished, waits, (time.monotonic() - started) * 1000, ok))
            except Exception:
                log.exception("on_step hook failed (ignored)")

    def _fail_everything(self, exc: BaseException) -> None:
        with self._lock:
            requests = list(self._requests)
            self._requests.clear()
            self._queued = 0
        for batch in self._batches.values():
            requests += [job.tag.request for job in batch.fail()]
        self._batches.clear()
        for request in requests:
            request.cancelled = True
            _call_soon(request, request.fail, exc)


def _call_soon(request: _Request, fn: Callable[..., None], *args: object) -> None:
    """Run ``fn`` on the request's event loop (ignored when that loop is gone)."""
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for this request any more
        request.loop.call_soon_threadsafe(fn, *args)
