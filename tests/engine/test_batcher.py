"""Dynamic batcher tests with a deterministic fake process function (no model)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from engine.batcher import (
    BatcherClosedError,
    BatcherConfig,
    BatchStats,
    DeadlineExceededError,
    DynamicBatcher,
    QueueFullError,
)


class Recorder:
    """process(key, items) that records calls, can block on an event and fails on a poisoned item."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.gate = gate
        self.entered = threading.Event()

    def __call__(self, key: str, items: list[str]) -> list[str]:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        self.calls.append((key, list(items)))
        if "poison" in items:
            raise RuntimeError("bad batch")
        return [f"{key}:{item.upper()}" for item in items]

    @property
    def seen(self) -> list[str]:
        return [item for _, items in self.calls for item in items]


def run(coro_fn: Callable[[], object]) -> object:
    return asyncio.run(coro_fn())  # type: ignore[arg-type]


def test_concurrent_requests_are_batched_and_results_match() -> None:
    recorder = Recorder()

    async def main() -> list[list[str]]:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=16, max_wait_ms=20))
        await batcher.start()
        results = await asyncio.gather(*(batcher.submit("en-de", [f"s{i}", f"t{i}"]) for i in range(32)))
        await batcher.stop()
        return results

    results = run(main)
    assert results == [[f"en-de:S{i}", f"en-de:T{i}"] for i in range(32)]
    assert len(recorder.calls) <= 6  # 64 items in batches of 16, not 32 calls
    assert all(len(items) <= 16 for _, items in recorder.calls)


def test_failed_batch_fails_only_its_requests_and_worker_survives() -> None:
    recorder = Recorder()

    async def main() -> tuple[object, object, list[str]]:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=2, max_wait_ms=50))
        await batcher.start()
        bad = await asyncio.gather(batcher.submit("k", ["poison"]), batcher.submit("k", ["x"]),
                                   return_exceptions=True)
        good = await asyncio.gather(batcher.submit("k", ["a"]), batcher.submit("k", ["b"]), return_exceptions=True)
        after = await batcher.submit("k", ["c"])
        await batcher.stop()
        return bad, good, after

    bad, good, after = run(main)  # type: ignore[misc]
    assert all(isinstance(r, RuntimeError) for r in bad)  # type: ignore[union-attr]
    assert good == [["k:A"], ["k:B"]] and after == ["k:C"]


def test_queue_full_is_refused_at_once() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)

    async def main() -> None:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=1, max_wait_ms=0, max_queue_items=2))
        await batcher.start()
        first = asyncio.create_task(batcher.submit("k", ["a"]))
        await asyncio.to_thread(recorder.entered.wait, 5)  # "a" is being processed, queue is empty
        queued = asyncio.create_task(batcher.submit("k", ["b", "c"]))
        await asyncio.sleep(0)
        with pytest.raises(QueueFullError, match="queue full"):
            await batcher.submit("k", ["d"])
        with pytest.raises(ValueError, match="max_queue_items"):
            await batcher.submit("k", ["1", "2", "3"])
        gate.set()
        assert await first == ["k:A"] and await queued == ["k:B", "k:C"]
        await batcher.stop()

    run(main)


def test_deadline_expires_queued_work_without_processing_it() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)

    async def main() -> None:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=1, max_wait_ms=0))
        await batcher.start()
        blocker = asyncio.create_task(batcher.submit("k", ["slow"]))
        await asyncio.to_thread(recorder.entered.wait, 5)
        with pytest.raises(DeadlineExceededError):
            await batcher.submit("k", ["late"], deadline=time.monotonic() + 0.05)
        gate.set()
        await blocker
        assert await batcher.submit("k", ["next"]) == ["k:NEXT"]
        await batcher.stop()

    run(main)
    assert "late" not in recorder.seen


def test_cancelled_request_is_dropped() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)

    async def main() -> None:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=1, max_wait_ms=0))
        await batcher.start()
        blocker = asyncio.create_task(batcher.submit("k", ["slow"]))
        await asyncio.to_thread(recorder.entered.wait, 5)
        gone = asyncio.create_task(batcher.submit("k", ["gone1", "gone2"]))
        await asyncio.sleep(0.01)
        assert batcher.queue_depth == 2
        gone.cancel()
        await asyncio.sleep(0.01)
        assert batcher.queue_depth == 0
        gate.set()
        await blocker
        await batcher.stop()

    run(main)
    assert "gone1" not in recorder.seen and "gone2" not in recorder.seen


def test_stop_drains_accepted_work_and_refuses_new() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)

    async def main() -> None:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=2, max_wait_ms=0))
        await batcher.start()
        tasks = [asyncio.create_task(batcher.submit("k", [f"x{i}"])) for i in range(5)]
        await asyncio.to_thread(recorder.entered.wait, 5)
        stopping = asyncio.create_task(batcher.stop(drain=True, timeout=10))
        await asyncio.sleep(0.01)
        with pytest.raises(BatcherClosedError):
            await batcher.submit("k", ["late"])
        gate.set()
        await stopping
        assert [await t for t in tasks] == [[f"k:X{i}"] for i in range(5)]

    run(main)


def test_event_loop_stays_free_while_a_batch_runs() -> None:
    gate = threading.Event()
    recorder = Recorder(gate)

    async def main() -> int:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_wait_ms=0))
        await batcher.start()
        task = asyncio.create_task(batcher.submit("k", ["a"]))
        await asyncio.to_thread(recorder.entered.wait, 5)
        ticks = 0
        for _ in range(5):  # a "health check" coroutine keeps running while process() blocks
            await asyncio.sleep(0.001)
            ticks += 1
        gate.set()
        await task
        await batcher.stop()
        return ticks

    assert run(main) == 5


def test_token_limit_and_keys_separate_batches() -> None:
    recorder = Recorder()
    stats: list[BatchStats] = []

    async def main() -> None:
        batcher = DynamicBatcher(recorder, BatcherConfig(max_batch_size=10, max_batch_tokens=10, max_wait_ms=20),
                                 cost=len, on_batch=stats.append)
        await batcher.start()
        await asyncio.gather(batcher.submit("en-de", ["aaaa", "bbbb", "cccc"]), batcher.submit("de-en", ["dd"]),
                             batcher.submit("en-de", ["x" * 30]))
        await batcher.stop()

    run(main)
    for _key, items in recorder.calls:
        assert len({k for k, its in recorder.calls if its == items}) == 1
        assert sum(len(i) for i in items) <= 10 or len(items) == 1
    assert ("de-en", ["dd"]) in recorder.calls
    assert sorted(recorder.seen) == sorted(["aaaa", "bbbb", "cccc", "dd", "x" * 30])
    assert sum(s.size for s in stats) == 5 and all(s.ok for s in stats)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        BatcherConfig(max_batch_size=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatcherConfig(max_wait_ms=-1)
