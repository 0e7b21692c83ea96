"""Dynamic batching across requests: a bounded queue, batches cut by size/tokens/wait, one worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("transduce.batcher")


class QueueFullError(Exception):
    """The queue has no room for the request's items (the service answers 503 with Retry-After)."""


class DeadlineExceededError(Exception):
    """The request's deadline passed before its items were processed (504)."""


class BatcherClosedError(Exception):
    """The batcher is stopping or stopped and takes no new work (503)."""


@dataclass(frozen=True)
class BatcherConfig:
    """Batch formation limits; a batch is cut at whichever is reached first."""

    max_batch_size: int = 32  # items (sentences) per engine call
    max_batch_tokens: int = 8192  # sum of item costs per engine call (an item costlier than this goes alone)
    max_wait_ms: float = 5.0  # how long the oldest queued item waits for company
    max_queue_items: int = 1024  # bounded queue: a submit that would exceed it is refused at once

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {self.max_batch_tokens}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0 (0 = no waiting), got {self.max_wait_ms}")
        if self.max_queue_items < 1:
            raise ValueError(f"max_queue_items must be >= 1, got {self.max_queue_items}")


@dataclass(frozen=True)
class BatchStats:
    """One engine call, reported to the ``on_batch`` hook."""

    size: int
    tokens: int
    queue_wait_ms: list[float]
    inference_ms: float
    ok: bool


@dataclass(eq=False)
class _Request(Generic[K, T, R]):
    key: K
    items: Sequence[T]
    deadline: float | None
    future: asyncio.Future[list[R]]
    results: list[Any] = field(default_factory=list)
    remaining: int = 0

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


@dataclass(eq=False)
class _Item(Generic[K, T, R]):
    request: _Request[K, T, R]
    index: int
    cost: int
    enqueued: float


class DynamicBatcher(Generic[K, T, R]):
    """Merges items of concurrent requests into engine calls of ``process(key, items) -> results``."""

    def __init__(
        self,
        process: Callable[[K, list[T]], list[R]],
        config: BatcherConfig | None = None,
        *,
        cost: Callable[[T], int] = lambda _: 1,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        self.process, self.config, self.cost, self.on_batch = process, config or BatcherConfig(), cost, on_batch
        self._queue: deque[_Item[K, T, R]] = deque()
        self._wakeup: asyncio.Event | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.in_flight = 0

    @property
    def queue_depth(self) -> int:
        """Items waiting for a batch."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        """True once stop() began."""
        return self._closed

    async def start(self) -> None:
        """Start the collector task and the worker thread."""
        if self._task is not None:
            raise RuntimeError("batcher already started")
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transduce-engine")
        self._task = asyncio.create_task(self._run(), name="transduce-batcher")

    async def submit(self, key: K, items: Sequence[T], *, deadline: float | None = None) -> list[R]:
        """Queue ``items`` (batched only with items of an equal ``key``); results come back in item order."""
        if self._closed or self._task is None or self._wakeup is None:
            raise BatcherClosedError("the batcher is not running (server starting up or shutting down)")
        if len(items) > self.config.max_queue_items:
            raise ValueError(f"a request of {len(items)} items can never fit the queue "
                             f"(max_queue_items={self.config.max_queue_items})")
        if not items:
            return []
        if len(self._queue) + len(items) > self.config.max_queue_items:
            raise QueueFullError(f"queue full ({len(self._queue)} of {self.config.max_queue_items} items waiting)")
        loop = asyncio.get_running_loop()
        request: _Request[K, T, R] = _Request(key, items, deadline, loop.create_future(), [None] * len(items),
                                              len(items))
        now = time.monotonic()
        self._queue.extend(_Item(request, i, max(1, int(self.cost(it))), now) for i, it in enumerate(items))
        self._wakeup.set()
        try:
            if deadline is None:
                return await request.future
            return await asyncio.wait_for(asyncio.shield(request.future), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._drop(request)
            raise DeadlineExceededError("the request timed out before it was translated") from None
        except asyncio.CancelledError:
            self._drop(request)  # the client went away: its queued items are never processed
            raise

    def _drop(self, request: _Request[K, T, R]) -> None:
        self._queue = deque(item for item in self._queue if item.request is not request)
        if not request.future.done():
            request.future.cancel()

    def _expire(self, now: float) -> None:
        expired = {id(it.request): it.request for it in self._queue
                   if it.request.deadline is not None and it.request.deadline <= now}
        for request in expired.values():
            request.fail(DeadlineExceededError("the request timed out while queued"))
            self._drop(request)

    def _take_batch(self) -> list[_Item[K, T, R]]:
        """Items with the oldest item's key, FIFO, up to the size and token limits."""
        key = self._queue[0].request.key
        batch: list[_Item[K, T, R]] = []
        tokens = 0
        rest: deque[_Item[K, T, R]] = deque()
        while self._queue:
            item = self._queue.popleft()
            full = len(batch) >= self.config.max_batch_size or (batch and tokens + item.cost >
                                                                  self.config.max_batch_tokens)
            if item.request.key != key or full:
                rest.append(item)
                if full:
                    break
                continue
            batch.append(item)
            tokens += item.cost
        rest.extend(self._queue)
        self._queue = rest
        return batch

    def _ready(self, now: float) -> bool:
        """A batch is due: the oldest item waited max_wait_ms, or enough items/tokens of its key are queued."""
        if not self._queue:
            return False
        if now - self._queue[0].enqueued >= self.config.max_wait_ms / 1000 or self._closed:
            return True
        key = self._queue[0].request.key
        same = [it for it in self._queue if it.request.key == key]
        return (len(same) >= self.config.max_batch_size
                or sum(it.cost for it in same) >= self.config.max_batch_tokens)

    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            self._expire(time.monotonic())
            if not self._queue:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            now = time.monotonic()
            if not self._ready(now):
                self._wakeup.clear()
                wait = self.config.max_wait_ms / 1000 - (now - self._queue[0].enqueued)
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout=max(wait, 0.0))
                continue
            batch = self._take_batch()
            await self._execute(loop, batch)

    async def _execute(self, loop: asyncio.AbstractEventLoop, batch: list[_Item[K, T, R]]) -> None:
        started = time.monotonic()
        waits = [(started - it.enqueued) * 1000 for it in batch]
        key = batch[0].request.key
        inputs = [it.request.items[it.index] for it in batch]
        self.in_flight = len(batch)
        ok = True
        try:
            results = await loop.run_in_executor(self._executor, self.process, key, inputs)
            if len(results) != len(inputs):
                raise RuntimeError(f"process() returned {len(results)} results for {len(inputs)} items; "
                                   "it must return exactly one result per item, in order")
        except Exception as exc:  # noqa: BLE001 - a failed batch fails only its own requests
            ok = False
            log.exception("batch of %d items failed", len(batch))
            for item in batch:
                item.request.fail(exc)
                self._drop(item.request)
        else:
            for item, result in zip(batch, results, strict=True):
                request = item.request
                request.results[item.index] = result
                request.remaining -= 1
                if request.remaining == 0 and not request.future.done():
                    request.future.set_result(request.results)
        finally:
            self.in_flight = 0
        if self.on_batch is not None:
            try:
                self.on_batch(BatchStats(len(batch), sum(it.cost for it in batch), waits,
                                         (time.monotonic() - started) * 1000, ok))
            except Exception:  # noqa: BLE001
                log.exception("on_batch hook failed")

    async def stop(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Refuse new work; finish what was accepted (``drain``, bounded by ``timeout``) or fail it; stop the worker."""
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()
        if not drain:
            self._fail_queued()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except TimeoutError:
                self._fail_queued()
                self._task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _fail_queued(self) -> None:
        for item in list(self._queue):
            item.request.fail(BatcherClosedError("the server shut down before this request was translated"))
        self._queue.clear()
