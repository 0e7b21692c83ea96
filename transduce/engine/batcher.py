"""Dynamic batching across requests: a bounded queue, batches cut by size/tokens/wait, one or more worker threads."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from transduce.engine.errors import BatcherClosedError, DeadlineExceededError, QueueFullError, RequestTooLargeError
from transduce.engine.options import MAX_BATCH_SIZE, MAX_QUEUE_ITEMS

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("transduce.batcher")


@dataclass(frozen=True)
class BatcherConfig:
    """Batch formation limits; a batch is cut at whichever is reached first."""

    max_batch_size: int = MAX_BATCH_SIZE  # items (sentences) per process() call
    max_batch_tokens: int = 4096  # sum of item costs per process() call (an item costlier than this goes alone)
    max_wait_ms: float = 5.0  # how long the oldest queued item waits for company (monotonic deadline)
    max_queue_items: int = MAX_QUEUE_ITEMS  # bounded queue: a submit that would exceed it is refused at once
    workers: int = 1  # process() calls running at once, each on its own thread (process must then be thread-safe)

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_batch_tokens", "max_queue_items", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.max_wait_ms, int | float) or not math.isfinite(self.max_wait_ms) or self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be a finite number >= 0 (0 = no waiting), got {self.max_wait_ms!r}")


@dataclass(frozen=True)
class BatchStats:
    """One engine call, reported to the ``on_batch`` hook."""

    size: int
    tokens: int
    queue_wait_ms: list[float]
    inference_ms: float
    ok: bool
    abandoned: int = 0  # of the items, those process() was told nobody waited for any more (not finished)


@dataclass(eq=False)
class _Request(Generic[K, T, R]):
    """One submit: its items, the results so far and the future its caller awaits."""

    key: K
    items: Sequence[T]
    deadline: float | None
    future: asyncio.Future[list[R]]
    results: list[R | None] = field(init=False)
    remaining: int = field(init=False)

    def __post_init__(self) -> None:
        self.results, self.remaining = [None] * len(self.items), len(self.items)

    def deliver(self, index: int, result: R) -> None:
        """Store one item's result; complete the future with the last one (ignored once the request is over)."""
        if self.future.done():
            return
        self.results[index] = result
        self.remaining -= 1
        if self.remaining == 0:
            self.future.set_result(cast(list[R], self.results))

    def fail(self, exc: BaseException) -> None:
        """Fail the request unless it is already over."""
        if not self.future.done():
            self.future.set_exception(exc)


@dataclass(eq=False)
class _Item(Generic[K, T, R]):
    """One queued item of a request."""

    request: _Request[K, T, R]
    index: int
    cost: int
    enqueued: float
    finish: int = 0  # virtual finish time: when the batcher's clock would have served it fairly (see _in_turns)
    turn: int = 0  # the turn it is served in (see _in_turns)


class Delivery(Generic[K, T, R]):
    """What ``process`` gets as ``deliver``: call it with ``(i, result)`` (from the worker thread) as item ``i`` is
    done; ``abandoned()`` lists the items nobody waits for any more (client gone, deadline passed, request failed),
    which ``process`` may stop working on: their results are ignored, delivered or returned."""

    def __init__(self, batch: list[_Item[K, T, R]], loop: asyncio.AbstractEventLoop) -> None:
        self.batch, self.loop = batch, loop
        self.delivered: set[int] = set()  # touched on the loop's thread only
        self.sent: set[int] = set()  # results handed to the loop (the worker's thread adds, then reads)
        self.given_up: set[int] = set()  # what abandoned() said (the worker's thread adds, the loop's reads)

    def __call__(self, i: int, result: R) -> None:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.batch):
            raise ValueError(f"deliver() got item index {i!r}; the batch has items 0 to {len(self.batch) - 1}")
        self.sent.add(i)  # before the loop can run it: a result on its way is never given up
        self.loop.call_soon_threadsafe(self.hand_over, i, result)

    def hand_over(self, i: int, result: R) -> None:
        """On the loop: item ``i``'s result to its request (once; never for an item given up)."""
        if i not in self.delivered and i not in self.given_up:
            self.delivered.add(i)
            self.batch[i].request.deliver(self.batch[i].index, result)

    def abandoned(self) -> list[int]:
        """Items whose request is over: ended on the loop (cancelled, timed out, failed) or past its deadline (the
        loop's timeout may not have fired yet), and whose result was not handed over (the loop decides on those).
        Read from the worker's thread: ``future.done()`` is one attribute."""
        now = time.monotonic()
        out = [
            i
            for i, item in enumerate(self.batch)
            if i not in self.sent
            and (item.request.future.done() or (item.request.deadline is not None and item.request.deadline <= now))
        ]
        self.given_up.update(out)
        return out


class DynamicBatcher(Generic[K, T, R]):
    """Merges items of concurrent requests into engine calls of ``process(key, items, deliver) -> results``.

    ``process`` may call ``deliver(i, result)`` (from its worker thread) as soon as item ``i`` is done: a request
    whose items are all delivered is answered then, not when the rest of the batch is; ``deliver.abandoned()``
    (``Delivery``) says which items nobody waits for any more. It still returns one result per item, in order; those
    of items already delivered or abandoned are ignored."""

    def __init__(
        self,
        process: Callable[[K, list[T], Delivery[K, T, R]], list[R]],
        config: BatcherConfig | None = None,
        *,
        cost: Callable[[T], int] = lambda _: 1,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self.process, self.config, self.cost, self.on_batch = process, config or BatcherConfig(), cost, on_batch
        self._queue: deque[_Item[K, T, R]] = deque()
        self._running: list[list[_Item[K, T, R]]] = []  # the batches inside process() calls now
        self._wakeup: asyncio.Event | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._clock = 0  # virtual time (see _share): the largest finish time dispatched so far
        # a turn: a quarter of max_batch_tokens cost units, or a quarter of max_batch_size items (see _share)
        self._quantum = max(1, self.config.max_batch_tokens // 4)
        self._per_turn = max(1, self.config.max_batch_size // 4)

    @property
    def queue_depth(self) -> int:
        """Items waiting for a batch."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Items inside the process() calls now running."""
        return sum(len(batch) for batch in self._running)

    @property
    def closed(self) -> bool:
        """True once stop() began (or the batcher loop died)."""
        return self._closed

    async def start(self) -> None:
        """Start the collector task (on the running loop) and the worker threads."""
        if self._task is not None or self._closed:
            raise RuntimeError("batcher already started (a DynamicBatcher cannot be restarted; create a new one)")
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="transduce-engine")
        self._task = asyncio.create_task(self._run(), name="transduce-batcher")

    async def submit(self, key: K, items: Sequence[T], *, deadline: float | None = None) -> list[R]:
        """Queue ``items`` (batched only with items of an equal ``key``); results come back in item order."""
        if self._closed:
            raise BatcherClosedError("the batcher is shutting down and takes no new requests")
        if self._task is None or self._wakeup is None:
            raise BatcherClosedError("the batcher is not running yet: call start() first")
        limit = self.config.max_queue_items
        if len(items) > limit:
            raise RequestTooLargeError(len(items), limit)
        if not items:
            return []
        now = time.monotonic()
        if deadline is not None and deadline <= now:
            raise DeadlineExceededError("the request's deadline passed before it was queued")
        if len(self._queue) + len(items) > limit:
            raise QueueFullError(
                f"queue full: {len(self._queue)} of {limit} items waiting, no room for {len(items)} more"
            )
        costs = [int(self.cost(item)) for item in items]
        if min(costs) < 0:
            raise ValueError(f"cost() must return a non-negative int, got {min(costs)}")
        request: _Request[K, T, R] = _Request(key, items, deadline, asyncio.get_running_loop().create_future())
        # a request starts at the clock: it waits behind what was queued earlier, not all of it; its turns count from
        # its start, so a request of a turn's worth or less is served in one turn, wherever the clock stands
        start, used, turn_length = self._clock, 0, self._quantum * self._per_turn
        for i, c in enumerate(costs):
            turn = start // turn_length + used // turn_length
            used += self._share(c)
            self._queue.append(_Item(request, i, c, now, start + used, turn))
        self._wakeup.set()
        try:
            if deadline is None:
                return await request.future
            return await asyncio.wait_for(request.future, deadline - time.monotonic())
        except TimeoutError:
            self._drop([request])  # items in a running batch finish, but their results are discarded
            raise DeadlineExceededError("the request's deadline passed before it was processed") from None
        except asyncio.CancelledError:
            self._drop([request])  # the client went away: its queued items are never processed
            raise

    async def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Refuse new work; finish what was accepted (``drain``, bounded by ``timeout``) or fail it; stop the worker."""
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()
        if not drain:
            self._fail_queued(BatcherClosedError("the server shut down before this request was processed"))
        if self._task is not None and not self._task.done():
            done, _ = await asyncio.wait({self._task}, timeout=timeout)
            if not done:  # out of time: the loop's exit fails what is left (the running thread is abandoned)
                log.warning(
                    "stop(): %d queued and %d running items not finished %s",
                    self.queue_depth,
                    self.in_flight,
                    f"within {timeout:g} s" if timeout else "when stopped (no time left)",
                )
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _drop(self, requests: Iterable[_Request[K, T, R]]) -> None:
        """End ``requests`` (a late result is ignored) and remove their queued items."""
        gone = set(requests)
        for request in gone:
            if not request.future.done():
                request.future.cancel()
        if any(item.request in gone for item in self._queue):
            self._queue = deque(item for item in self._queue if item.request not in gone)

    def _fail_queued(self, exc: BaseException) -> None:
        """Fail every request with queued items and empty the queue."""
        for item in self._queue:
            item.request.fail(exc)
        self._queue.clear()

    def _expire(self, now: float) -> None:
        """Fail requests whose deadline passed while their items were queued."""
        late = {it.request for it in self._queue if it.request.deadline is not None and it.request.deadline <= now}
        for request in late:
            request.fail(DeadlineExceededError("the request's deadline passed while it was queued"))
        self._drop(late)

    def _share(self, cost: int) -> int:
        """What an item of ``cost`` takes of a turn, in virtual time. A turn is a quarter of ``max_batch_tokens`` or a
        quarter of ``max_batch_size`` items, whichever a request's items fill first: cheap sentences fill it by
        number, so a request of many short ones holds a newcomer back one batch at most, not several. Never 0: the
        clock moves with every item served, so free items cannot hold an older one back."""
        return max(cost * self._per_turn, self._quantum)  # a turn's length in virtual time: their product

    def _plan(self, order: list[_Item[K, T, R]], key: K) -> tuple[list[_Item[K, T, R]], bool]:
        """The next batch of ``key`` and whether a limit was reached: ``key``'s items in ``order`` (the queue in turn
        order, ``_in_turns``), within the limits."""
        size, max_tokens = self.config.max_batch_size, self.config.max_batch_tokens
        batch: list[_Item[K, T, R]] = []
        tokens = 0
        for item in order:
            if item.request.key != key:
                continue
            if len(batch) == size or (batch and tokens + item.cost > max_tokens):
                return batch, True
            batch.append(item)
            tokens += item.cost
        return batch, len(batch) == size or tokens >= max_tokens

    def _in_turns(self) -> list[_Item[K, T, R]]:
        """The queue in the order requests take turns (fair queueing): an item's finish time is the batcher's clock
        when its request came plus what the request's items up to it take of a turn (``_share``), and the clock moves
        to the largest finish time dispatched. A request's items go in turns counted from its start, oldest first
        within a turn: the sentences of a request that comes behind a long document go before the rest of that
        document, the document's next ones before later arrivals' (nothing starves), and a small request's sentences
        (a turn's worth) stay together. The next batch is of the first item's key (``_next_batch``)."""
        return sorted(self._queue, key=lambda item: item.turn)  # stable: oldest first within a turn

    async def _sleep(self, timeout: float | None) -> None:
        """Wait for a submit/stop wake-up or the timeout."""
        assert self._wakeup is not None
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _next_batch(self) -> list[_Item[K, T, R]] | None:
        """Wait until a batch is due (full, an item has waited max_wait_ms, or stopping); None when done."""
        while True:
            self._expire(time.monotonic())
            if not self._queue:
                if self._closed:
                    return None
                await self._sleep(None)
                continue
            order = self._in_turns()
            batch, full = self._plan(order, order[0].request.key)
            wait = self._queue[0].enqueued + self.config.max_wait_ms / 1000 - time.monotonic()
            if not (full or wait <= 0 or self._closed):  # a free worker takes another key's full batch, not waits
                others = (self._plan(order, key) for key in list(dict.fromkeys(i.request.key for i in order))[1:])
                batch, full = next((planned for planned in others if planned[1]), (batch, full))
            if full or wait <= 0 or self._closed:
                taken = set(map(id, batch))
                self._queue = deque(item for item in self._queue if id(item) not in taken)
                self._clock = max(self._clock, *(item.finish for item in batch))
                return batch
            await self._sleep(wait)

    async def _run(self) -> None:
        """Collector loop: form a batch whenever a worker is free and one is due, start it, repeat."""
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                while len(running) >= self.config.workers:
                    _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                if (batch := await self._next_batch()) is None:
                    break
                running.add(asyncio.create_task(self._execute(batch)))
            if running:
                await asyncio.wait(running)
        except Exception:
            log.exception("batcher loop crashed; refusing new work")
        finally:  # normally nothing is left; after a crash or a stop() timeout, nobody may wait forever
            for task in running:
                task.cancel()
            self._closed = True
            exc = BatcherClosedError("the batcher stopped before this request was processed")
            self._fail_queued(exc)
            for batch in self._running:
                for item in batch:
                    item.request.fail(exc)
            self._running = []

    async def _execute(self, batch: list[_Item[K, T, R]]) -> None:
        """Run one process() call in the worker thread and hand results (or its error) to the batch's requests."""
        key = batch[0].request.key
        inputs = [item.request.items[item.index] for item in batch]
        started = time.monotonic()
        self._running.append(batch)
        ok = True
        loop = asyncio.get_running_loop()
        deliver = Delivery(batch, loop)
        try:
            results = await loop.run_in_executor(self._executor, self.process, key, inputs, deliver)
            if len(results) != len(inputs):
                raise RuntimeError(
                    f"process() returned {len(results)} results for {len(inputs)} items; "
                    "it must return exactly one result per item, in order"
                )
        except Exception as exc:  # a failed batch fails only its own requests; the loop keeps serving
            ok = False
            log.exception("process() failed for a batch of %d items (key %r)", len(batch), key)
            failed = {item.request for item in batch}
            for request in failed:
                request.fail(exc)
            self._drop(failed)  # their items in later batches are not processed
        else:
            for i, result in enumerate(results):
                deliver.hand_over(i, result)
        self._running = [b for b in self._running if b is not batch]
        if self.on_batch is not None:
            stats = BatchStats(
                len(batch),
                sum(item.cost for item in batch),
                [(started - item.enqueued) * 1000 for item in batch],
                (time.monotonic() - started) * 1000,
                ok,
                len(deliver.given_up),
            )
            try:
                self.on_batch(stats)
            except Exception:
                log.exception("on_batch hook failed (ignored)")
