"""Step-level (continuous) batching: the sentences of every request queue fairly, join the running batch between
decoder steps, and leave as soon as they finish; a request is answered when its last sentence is done.

One worker thread per engine replica of the ``Translator`` (its ``runners``), each with its own running batches, all
taking from one queue. Between two steps a worker drops cancelled and expired sentences, admits queued ones
round-robin across requests while its batch has room (``max_batch_size`` sentences, ``max_tokens_in_flight`` source
tokens x beam, per worker), encodes the newcomers in one pass and merges them into its running batch of their beam
width, then steps each of its running batches once. With several workers the least loaded one takes newcomers, and
one worker's Python bookkeeping (search, joins) runs while another's onnxruntime step holds the cores. Queue errors
are the batcher's (``QueueFullError``, ``RequestTooLargeError``, ``DeadlineExceededError``, ``BatcherClosedError``),
so the service maps both kinds of queue the same way.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from transduce.engine.denormals import flushing_denormals
from transduce.engine.errors import (
    BatcherClosedError,
    DeadlineExceededError,
    InputTooLongError,
    QueueFullError,
    RequestTooLargeError,
)
from transduce.engine.inputs import texts_given
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions, SchedulerConfig
from transduce.engine.results import TranslationResult, passed_through
from transduce.engine.runner import CUDA, DecoderRunner
from transduce.engine.running import Job, RunningBatch
from transduce.engine.search import Hypothesis
from transduce.engine.slots import Request, Slot, StepStats, Timed, call_soon
from transduce.engine.text import has_letters
from transduce.engine.translator import Translator

__all__ = ["StepScheduler", "StepStats", "Timed"]

log = logging.getLogger("transduce.scheduler")


class StepScheduler:
    """Continuous batching over a ``Translator``: ``await submit(...)`` from the event loop; one worker thread per
    engine replica (``Translator.runners``), all taking from one fair queue."""

    def __init__(
        self,
        translator: Translator,
        config: SchedulerConfig | None = None,
        *,
        on_step: Callable[[StepStats], None] | None = None,
    ) -> None:
        config = (config or SchedulerConfig()).for_device(translator.provider == CUDA)  # an auto budget made concrete
        self.translator, self.config, self.on_step = translator, config, on_step
        self._lock = threading.Lock()  # the queue, and the step count
        self._requests: deque[Request] = deque()  # requests with queued jobs, in round-robin order
        self._queued = 0
        self._steps = 0  # decoder steps so far, every worker's
        self._workers = [_Worker(self, runner, i) for i, runner in enumerate(translator.runners)]
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._abort: BaseException | None = None

    def _wake(self) -> None:
        """Wake every worker (each waits on an event of its own, which only it clears: none misses a wake-up)."""
        for w in self._workers:
            w.wake.set()

    @property
    def workers(self) -> int:
        """Worker threads, one per engine replica."""
        return len(self._workers)

    @property
    def queue_depth(self) -> int:
        """Sentences waiting to join."""
        return self._queued

    @property
    def in_flight(self) -> int:
        """Sentences decoding now."""
        return sum(self.in_flight_by_worker)

    @property
    def in_flight_by_worker(self) -> list[int]:
        """Sentences decoding now in each worker."""
        return [w.sentences for w in self._workers]

    @property
    def closed(self) -> bool:
        """True once stop() began (or a worker died)."""
        return self._closed

    async def start(self) -> None:
        """Start the worker threads."""
        if self._threads or self._closed:
            raise RuntimeError("scheduler already started (a StepScheduler cannot be restarted; create a new one)")
        for w in self._workers:
            name = "transduce-scheduler" + (f"-{w.index}" if len(self._workers) > 1 else "")
            self._threads.append(threading.Thread(target=w.work, name=name, daemon=True))
        for thread in self._threads:
            thread.start()

    async def submit(
        self,
        texts: Sequence[str],
        *,
        source_lang: str,
        target_lang: str,
        options: DecodeOptions = DEFAULT_OPTIONS,
        deadline: float | None = None,
    ) -> list[Timed]:
        """Translate sentences; results in order. A blank text gives "" and one without a letter itself, stripped,
        without decoding, as ``Translator.translate`` does. Raises the batcher's queue errors."""
        texts = texts_given(texts)
        source_lang, target_lang = self.translator.spelt(source_lang, target_lang)
        if self._closed:
            raise BatcherClosedError("the scheduler is shutting down and takes no new requests")
        if not self._threads:
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
        request = Request(loop, loop.create_future(), len(texts), deadline, now)
        tokenizer = self.translator.tokenizer
        limit_tokens = self.translator.max_source_tokens
        passed = {i for i, text in enumerate(texts) if not has_letters(text)}  # (made-up words came back for them)
        for i, text in enumerate(texts):
            if i in passed:
                continue
            slot = Slot(request, i, now)
            ids = tokenizer.encode_source(text, target_lang)
            if len(ids) > limit_tokens:  # refused here, as translate() does: encoded, it failed its batch-mates too
                raise InputTooLongError(
                    f"a sentence has {len(ids)} tokens (input {i}); the model accepts at most {limit_tokens}"
                )
            request.pending.append(Job(ids, options, self._on_done(slot, options), request.over, tag=slot))
        for i in sorted(passed):  # answered at once (the request completes here when every text is one of them)
            request.deliver(i, Timed(passed_through(texts[i], options), now, now))
        if not request.pending:
            return await request.future
        with self._lock:
            if self._closed:  # again under the lock: a worker that crashed meanwhile failed the queue under it
                raise BatcherClosedError("the scheduler is shutting down and takes no new requests")
            queued = len(request.pending)
            if self._queued + queued > limit:
                raise QueueFullError(f"queue full: {self._queued} of {limit} sentences waiting, no room for {queued}")
            self._requests.append(request)
            self._queued += queued
            for job in request.pending:
                job.tag.queued_step = self._steps
        self._wake()
        try:
            if deadline is None:
                return await request.future
            return await asyncio.wait_for(request.future, deadline - time.monotonic())
        except TimeoutError:
            request.cancelled = True  # the worker drops its queued and running sentences at the next step
            self._wake()
            raise DeadlineExceededError("the request's deadline passed before it was processed") from None
        except asyncio.CancelledError:
            request.cancelled = True
            self._wake()
            raise

    async def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Refuse new work; finish what was accepted (``drain``, bounded by ``timeout``) or fail it; stop the
        workers."""
        self._closed = True
        if not drain:
            self._abort = BatcherClosedError("the server shut down before this request was processed")
        self._wake()
        if self._threads:
            await asyncio.to_thread(_join_all, self._threads, timeout)
            if any(t.is_alive() for t in self._threads):
                log.warning(
                    "stop(): %d queued and %d running sentences not finished %s",
                    self.queue_depth,
                    self.in_flight,
                    f"within {timeout:g} s" if timeout else "when stopped (no time left)",
                )
                self._abort = BatcherClosedError("the scheduler stopped before this request was processed")
                self._wake()

    def _on_done(self, slot: Slot, options: DecodeOptions) -> Callable[[list[Hypothesis]], None]:
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
            call_soon(slot.request, slot.request.deliver, slot.index, timed)

        return done


class _Worker:
    """One engine replica's running batches (one per beam width), admitted into and stepped by a thread of its own."""

    def __init__(self, owner: StepScheduler, runner: DecoderRunner, index: int) -> None:
        self.owner, self.runner, self.index = owner, runner, index
        self.batches: dict[int, RunningBatch] = {}  # by beam width
        self.waits: list[float] = []  # queue waits of the jobs admitted since the last step report
        self.steps = 0  # this worker's decoder steps (the scheduler counts every worker's)
        self.last_join = 0  # this worker's step count at its last join
        self.wake = threading.Event()  # set by the scheduler (submits, cancellations, stop) and by other workers
        self.refused = False  # its last admission left queued sentences it could not take

    @property
    def sentences(self) -> int:
        """Sentences decoding in this worker now."""
        return sum(b.sentences for b in list(self.batches.values()))

    def work(self) -> None:
        owner = self.owner
        try:
            with flushing_denormals():  # the worker only decodes: denormals flushed for its life (engine.denormals)
                while True:
                    if owner._abort is not None:
                        self.fail_everything(owner._abort)
                        return
                    self.admit()
                    if not self.batches:
                        if owner._closed and not owner._queued:
                            return
                        self.wake.wait(0.05 if owner._queued else None)
                        self.wake.clear()
                        continue
                    self.step()
        except Exception as exc:  # a bug: nobody may wait forever
            log.exception("scheduler worker crashed; refusing new work")
            with owner._lock:  # a submit checks it under the lock too: nothing is queued after the queue is failed
                owner._closed = True
            owner._abort = exc  # the other workers fail theirs too
            owner._wake()
            self.fail_everything(exc)

    def lighter_elsewhere(self) -> bool:
        """Whether another worker that took every queued sentence it could at its last admission decodes fewer
        sentences than this one: it takes the newcomers (they decode in the smaller batch, and the batches stay
        even), woken here in case it sleeps. A lighter worker that left some queued (no room for their cost, or
        their request's share used up there) is not waited for."""
        mine = self.sentences
        lighter = [w for w in self.owner._workers if w is not self and not w.refused and w.sentences < mine]
        for w in lighter:
            w.wake.set()
        return bool(lighter)

    def admit(self) -> None:
        """Move queued jobs into the running batches, round-robin across requests, within the limits; one request
        holds at most ``request_share`` of them (or one sentence), so a newcomer finds room at the next step."""
        owner = self.owner
        cfg, now = owner.config, time.monotonic()
        held: dict[int, list[int]] = {}  # per request: [sentences, cost] decoding now
        for job in (j for b in self.batches.values() for j in b.live_jobs()):
            mine = held.setdefault(id(job.tag.request), [0, 0])
            mine[0], mine[1] = mine[0] + 1, mine[1] + job.cost
        active, cost = sum(h[0] for h in held.values()), sum(h[1] for h in held.values())
        share_size = max(1, int(cfg.max_batch_size * cfg.request_share))
        share_cost = cfg.max_tokens_in_flight * cfg.request_share

        def fits(job: Job) -> bool:
            return not active or cost + job.cost <= cfg.max_tokens_in_flight

        def fair(request: Request, job: Job) -> bool:
            mine = held.get(id(request), [0, 0])
            return not mine[0] or (mine[0] < share_size and mine[1] + job.cost <= share_cost)

        admitted: list[Job] = []

        def take(request: Request) -> None:
            nonlocal active, cost
            job = request.pending.popleft()
            if not request.pending:
                owner._requests.remove(request)
            owner._queued -= 1
            active, cost = active + 1, cost + job.cost
            mine = held.setdefault(id(request), [0, 0])
            mine[0], mine[1] = mine[0] + 1, mine[1] + job.cost
            admitted.append(job)
            job.tag.admitted, job.tag.admitted_step = now, owner._steps
            self.waits.append((now - job.tag.queued) * 1000)

        with owner._lock:
            for request in list(owner._requests):  # drop what nobody waits for any more
                if request.over() or not request.pending:
                    owner._queued -= len(request.pending)
                    request.pending.clear()
                    owner._requests.remove(request)
            may_join = self.may_join(active)
            if not owner._requests or not may_join or (active and self.lighter_elsewhere()):
                self.refused = bool(owner._requests) and not may_join  # deferring to a lighter worker is no refusal
                return
            starved = [
                r
                for r in owner._requests
                if r.pending[0].tag.blocked_since is not None
                and owner._steps - r.pending[0].tag.blocked_since >= cfg.starve_steps * len(owner._workers)
                and fair(r, r.pending[0])
            ]
            # the sentences kept out longest by what others hold go first, the costliest first among equals (the
            # others fit beside what is running later); at the first that does not fit, the batch drains for it: no
            # younger sentence may join and make it wait for another drain
            draining = False
            for request in sorted(starved, key=lambda r: (r.pending[0].tag.blocked_since, -r.pending[0].cost)):
                if not fits(request.pending[0]) or active >= cfg.max_batch_size:
                    draining = True
                    for other in owner._requests:  # kept out by the drain: their starving starts now, not later
                        job = other.pending[0]
                        if job.tag.blocked_since is None and fair(other, job):
                            job.tag.blocked_since = owner._steps
                    break
                take(request)
            blocked = 0  # requests in a row that could not take a sentence
            while not draining and owner._requests and active < cfg.max_batch_size and blocked < len(owner._requests):
                request = owner._requests[0]
                job = request.pending[0]
                owner._requests.rotate(-1)  # the next sentence comes from the next request
                if not (fits(job) and fair(request, job)):
                    if fair(request, job) and job.tag.blocked_since is None:
                        job.tag.blocked_since = owner._steps  # within its share, kept out by what others hold
                    blocked += 1
                    continue
                blocked = 0
                take(request)
            self.refused = bool(owner._requests)
        if admitted:
            self.last_join = self.steps
        self.join(admitted)

    def may_join(self, active: int) -> bool:
        """Whether newcomers may join now: the batch has room, and it is empty or lightly used, or the last join
        was ``join_every_steps`` ago (joins in groups keep state copies and search objects few)."""
        cfg = self.owner.config
        free = cfg.max_batch_size - active
        if free <= 0:
            return False
        return not active or free >= cfg.join_free or self.steps - self.last_join >= cfg.join_every_steps

    def join(self, admitted: list[Job]) -> None:
        """Encode the admitted jobs, one encoder pass per distinct options, into the running batch of their beam
        width; a failure (e.g. out of memory) fails only the requests of that pass."""
        groups: dict[DecodeOptions, list[Job]] = {}
        for job in admitted:
            groups.setdefault(job.options, []).append(job)
        for options, jobs in groups.items():
            beam = options.beam_size
            batch = self.batches.setdefault(beam, RunningBatch(self.runner, self.owner.translator.manifest, beam))
            try:
                real, padded = batch.join(jobs)
            except Exception as exc:
                log.exception("encoding %d joining sentences failed (beam %d)", len(jobs), beam)
                for job in jobs:
                    request = job.tag.request
                    request.cancelled = True  # its other sentences are dropped at the next admission
                    call_soon(request, request.fail, exc)
                if batch.state is None:
                    del self.batches[beam]
                continue
            stats = self.owner.translator.stats
            with stats.lock:
                stats.batches += 1
                stats.source_tokens += real
                stats.padded_source_tokens += padded

    def step(self) -> None:
        active = self.sentences
        started, finished, ok = time.monotonic(), 0, True
        for beam, batch in list(self.batches.items()):
            try:
                finished += batch.step()
            except Exception as exc:  # a failed step fails only the requests decoding in that batch
                ok = False
                log.exception("decoder step failed for %d sentences (beam %d)", batch.sentences, beam)
                for job in batch.fail():
                    request = job.tag.request
                    request.cancelled = True
                    call_soon(request, request.fail, exc)
            if batch.state is None:
                del self.batches[beam]
        self.steps += 1
        with self.owner._lock:
            self.owner._steps += 1
        waits, self.waits = self.waits, []
        stats = self.owner.translator.stats
        with stats.lock:
            stats.decoder_steps += 1
            stats.sentences += finished
        if (on_step := self.owner.on_step) is not None:
            try:
                on_step(StepStats(active, finished, waits, (time.monotonic() - started) * 1000, ok, self.index))
            except Exception:
                log.exception("on_step hook failed (ignored)")

    def fail_everything(self, exc: BaseException) -> None:
        owner = self.owner
        with owner._lock:
            requests = list(owner._requests)
            owner._requests.clear()
            owner._queued = 0
        for batch in self.batches.values():
            requests += [job.tag.request for job in batch.fail()]
        self.batches.clear()
        for request in requests:
            request.cancelled = True
            call_soon(request, request.fail, exc)


def _join_all(threads: list[threading.Thread], timeout: float | None) -> None:
    """Join every thread within ``timeout`` seconds in all (None: wait for each)."""
    end = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if end is None else max(0.0, end - time.monotonic()))
