"""Dynamic batcher tests with a deterministic fake process function (no model): a gate holds the worker while
the test lines work up in the queue, so batch formation never depends on timing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from transduce.engine.batcher import BatcherConfig, BatchStats, DynamicBatcher
from transduce.engine.errors import BatcherClosedError, DeadlineExceededError, QueueFullError

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """process(key, items): records calls and threads, blocks on the "hold" item until released, fails on "poison"."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.threads: set[int] = set()
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def __call__(self, key: str, items: list[str], deliver: Callable[[int, str], None]) -> list[str]:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.threads.add(threading.get_ident())
            self.calls.append((key, list(items)))
            if "hold" in items:
                self.entered.set()
                assert self.gate.wait(10), "test never released the gate"
            if "poison" in items:
                raise RuntimeError("bad batch")
            return [expected(key, item) for item in items]
        finally:
            with self._lock:
                self.active -= 1

    @property
    def seen(self) -> list[str]:
        return [item for _, items in self.calls for item in items]


def expected(key: str, item: str) -> str:
    return f"{key}:{item.upper()}"


def run(main: Callable[[], Coroutine[Any, Any, Any]], recorder: Recorder | None = None) -> Any:
    """asyncio.run(main()), always opening the gate so no worker thread outlives the test."""
    try:
        return asyncio.run(main())
    finally:
        if recorder is not None:
            recorder.gate.set()


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    """Yield to the loop until ``cond()`` holds (fails the test after ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        await asyncio.sleep(0.001)


async def hold_worker(
    batcher: DynamicBatcher[str, str, str], recorder: Recorder, size: int = 1
) -> asyncio.Task[list[str]]:
    """Submit a "hold" request of ``size`` items and return once process() is blocked inside it."""
    task = asyncio.create_task(batcher.submit("hold", ["hold"] + [f"hold{i}" for i in range(1, size)]))
    assert await asyncio.to_thread(recorder.entered.wait, 5)
    return task


async def settled(awaitable: Awaitable[Any]) -> Any:
    """The result or the exception of ``awaitable``."""
    try:
        return await awaitable
    except Exception as exc:
        return exc


def make(recorder: Recorder, **kwargs: Any) -> DynamicBatcher[str, str, str]:
    cost = kwargs.pop("cost", lambda _: 1)
    on_batch = kwargs.pop("on_batch", None)
    return DynamicBatcher(recorder, BatcherConfig(**kwargs), cost=cost, on_batch=on_batch)


def test_concurrent_submits_share_few_calls_and_match_one_at_a_time() -> None:
    recorder, alone = Recorder(), Recorder()
    keys = ["en-de" if i % 3 else "de-en" for i in range(32)]
    requests = [[f"s{i}"] if i % 2 else [f"s{i}", f"t{i}", f"u{i}"] for i in range(32)]

    async def main() -> tuple[list[list[str]], list[list[str]]]:
        batcher = make(recorder, max_batch_size=16, max_wait_ms=20)
        await batcher.start()
        together = await asyncio.gather(*(batcher.submit(k, r) for k, r in zip(keys, requests, strict=True)))
        await batcher.stop()
        single = make(alone, max_batch_size=16, max_wait_ms=0)
        await single.start()
        one_by_one = [await single.submit(k, r) for k, r in zip(keys, requests, strict=True)]
        await single.stop()
        return together, one_by_one

    together, one_by_one = run(main)
    assert together == one_by_one == [[expected(k, x) for x in r] for k, r in zip(keys, requests, strict=True)]
    assert len(alone.calls) == 32
    assert len(recorder.calls) <= 8  # 64 items over 2 keys in batches of <= 16, instead of 32 calls
    assert all(len(items) <= 16 for _, items in recorder.calls)
    assert recorder.max_active == 1 and len(recorder.threads) == 1  # one worker thread, one call at a time


def test_full_batch_goes_without_waiting_and_a_partial_one_waits_for_company() -> None:
    recorder = Recorder()
    stats: list[BatchStats] = []

    async def main() -> None:
        batcher = make(recorder, max_batch_size=2, max_wait_ms=60_000, on_batch=stats.append)
        await batcher.start()
        assert await asyncio.wait_for(batcher.submit("k", ["a", "b"]), 5) == ["k:A", "k:B"]  # full: no 60 s wait
        first = asyncio.create_task(batcher.submit("k", ["c"]))
        await until(lambda: batcher.queue_depth == 1)
        await asyncio.sleep(0.02)
        assert not first.done()  # alone, it waits for company
        assert await asyncio.wait_for(batcher.submit("k", ["d"]), 5) == ["k:D"]
        assert await first == ["k:C"]
        await batcher.stop()

    run(main, recorder)
    assert recorder.calls == [("k", ["a", "b"]), ("k", ["c", "d"])]
    assert stats[1].queue_wait_ms[0] >= 20  # "c" waited for "d"


def test_max_wait_elapses_for_a_lone_item() -> None:
    recorder = Recorder()
    stats: list[BatchStats] = []

    async def main() -> list[str]:
        batcher = make(recorder, max_wait_ms=30, on_batch=stats.append)
        await batcher.start()
        result = await batcher.submit("k", ["a"])
        await batcher.stop()
        return result

    assert run(main) == ["k:A"]
    assert len(stats) == 1 and stats[0].size == 1 and stats[0].ok
    assert stats[0].queue_wait_ms[0] >= 29 and stats[0].inference_ms >= 0


def test_large_request_is_split_over_batches_in_order() -> None:
    recorder = Recorder()
    items = [f"x{i}" for i in range(10)]

    async def main() -> list[str]:
        batcher = make(recorder, max_batch_size=4, max_wait_ms=0)
        await batcher.start()
        result = await batcher.submit("k", items)
        await batcher.stop()
        return result

    assert run(main) == [expected("k", x) for x in items]
    assert [items for _, items in recorder.calls] == [items[:4], items[4:8], items[8:]]


def test_failed_batch_fails_only_its_requests_and_the_next_batch_succeeds() -> None:
    recorder = Recorder()

    async def main() -> list[Any]:
        batcher = make(recorder, max_batch_size=2, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        tasks = [asyncio.create_task(settled(batcher.submit("k", [x]))) for x in ["poison", "x", "y", "z"]]
        split = asyncio.create_task(settled(batcher.submit("j", ["a", "poison", "c", "d"])))
        await until(lambda: batcher.queue_depth == 8)
        recorder.gate.set()
        out = [await t for t in tasks] + [await split, await hold, await batcher.submit("k", ["after"])]
        await batcher.stop()
        return out

    poisoned, same_batch, y, z, split, hold, after = run(main, recorder)
    assert isinstance(poisoned, RuntimeError) and isinstance(same_batch, RuntimeError)
    assert str(poisoned) == "bad batch"
    assert (y, z, hold, after) == (["k:Y"], ["k:Z"], ["hold:HOLD"], ["k:AFTER"])
    assert isinstance(split, RuntimeError)  # one failed item fails its request...
    assert "c" not in recorder.seen and "d" not in recorder.seen  # ...and its other queued items are dropped


def test_wrong_result_count_fails_the_batch_with_a_clear_error() -> None:
    stats: list[BatchStats] = []

    def process(key: str, items: list[str], deliver: Callable[[int, str], None]) -> list[str]:
        return items[:1]

    async def main() -> tuple[Any, Any]:
        batcher: DynamicBatcher[str, str, str] = DynamicBatcher(
            process, BatcherConfig(max_wait_ms=0), on_batch=stats.append
        )
        await batcher.start()
        bad = await settled(batcher.submit("k", ["a", "b"]))
        good = await batcher.submit("k", ["c"])
        await batcher.stop()
        return bad, good

    bad, good = run(main)
    assert isinstance(bad, RuntimeError) and "returned 1 results for 2 items" in str(bad)
    assert good == ["c"]
    assert [s.ok for s in stats] == [False, True]


def test_on_batch_hook_errors_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()

    def hook(stats: BatchStats) -> None:
        raise ValueError("hook broke")

    async def main() -> list[list[str]]:
        batcher = make(recorder, max_wait_ms=0, on_batch=hook)
        await batcher.start()
        out = [await batcher.submit("k", ["a"]), await batcher.submit("k", ["b"])]
        await batcher.stop()
        return out

    with caplog.at_level(logging.ERROR, logger="transduce.batcher"):
        assert run(main) == [["k:A"], ["k:B"]]
    assert "on_batch hook failed" in caplog.text


def test_queue_full_is_refused_at_once_and_all_or_nothing() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_batch_size=8, max_wait_ms=0, max_queue_items=3)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        assert batcher.queue_depth == 0 and batcher.in_flight == 1
        queued = asyncio.create_task(batcher.submit("k", ["b", "c"]))
        await until(lambda: batcher.queue_depth == 2)
        with pytest.raises(QueueFullError, match="queue full"):
            await batcher.submit("k", ["d", "e"])
        assert batcher.queue_depth == 2  # nothing of the refused request was queued
        fits = asyncio.create_task(batcher.submit("k", ["d"]))
        await until(lambda: batcher.queue_depth == 3)
        with pytest.raises(ValueError, match="max_queue_items=3"):
            await batcher.submit("k", ["1", "2", "3", "4"])
        recorder.gate.set()
        assert await hold == ["hold:HOLD"] and await queued == ["k:B", "k:C"] and await fits == ["k:D"]
        assert batcher.queue_depth == 0 and batcher.in_flight == 0
        await batcher.stop()

    run(main, recorder)
    assert "e" not in recorder.seen


def test_deadline_fails_queued_request_promptly_and_it_is_never_processed() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_batch_size=4, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        with pytest.raises(DeadlineExceededError):  # raised while the worker is still blocked
            await batcher.submit("k", ["late1", "late2"], deadline=time.monotonic() + 0.05)
        assert batcher.queue_depth == 0 and not recorder.gate.is_set()
        with pytest.raises(DeadlineExceededError):  # already past: refused without queueing
            await batcher.submit("k", ["past"], deadline=time.monotonic() - 1)
        recorder.gate.set()
        await hold
        assert await batcher.submit("k", ["next"], deadline=time.monotonic() + 5) == ["k:NEXT"]
        await batcher.stop()

    run(main, recorder)
    assert not {"late1", "late2", "past"} & set(recorder.seen)


def test_deadline_inside_a_running_batch_discards_its_result() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_wait_ms=0)
        await batcher.start()
        task = asyncio.create_task(batcher.submit("hold", ["hold"], deadline=time.monotonic() + 0.05))
        assert await asyncio.to_thread(recorder.entered.wait, 5)
        with pytest.raises(DeadlineExceededError):
            await task
        assert batcher.in_flight == 1  # the call itself cannot be interrupted
        recorder.gate.set()
        assert await batcher.submit("k", ["next"]) == ["k:NEXT"]
        await batcher.stop()

    run(main, recorder)


def test_cancelled_request_items_are_never_processed() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_batch_size=8, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        gone = asyncio.create_task(batcher.submit("k", ["gone1", "gone2"]))
        kept = asyncio.create_task(batcher.submit("k", ["kept"]))
        await until(lambda: batcher.queue_depth == 3)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert batcher.queue_depth == 1
        recorder.gate.set()
        assert await hold == ["hold:HOLD"] and await kept == ["k:KEPT"]
        await batcher.stop()

    run(main, recorder)
    assert "gone1" not in recorder.seen and "gone2" not in recorder.seen


def test_stop_drains_accepted_work_and_refuses_new() -> None:
    recorder = Recorder()

    async def main() -> list[Any]:
        batcher = make(recorder, max_batch_size=2, max_wait_ms=60_000)
        await batcher.start()
        hold = await hold_worker(batcher, recorder, size=2)  # a full batch: goes at once
        tasks = [asyncio.create_task(batcher.submit("k", [f"x{i}"])) for i in range(5)]
        await until(lambda: batcher.queue_depth == 5)
        stopping = asyncio.create_task(batcher.stop(drain=True, timeout=10))
        await until(lambda: batcher.closed)
        with pytest.raises(BatcherClosedError):
            await batcher.submit("k", ["late"])
        recorder.gate.set()
        await stopping  # the partial last batch does not wait max_wait_ms while draining
        assert batcher.queue_depth == 0 and batcher.in_flight == 0
        return [await hold] + [await t for t in tasks]

    assert run(main, recorder) == [["hold:HOLD", "hold:HOLD1"]] + [[f"k:X{i}"] for i in range(5)]
    assert "late" not in recorder.seen


def test_stop_timeout_fails_the_remainder() -> None:
    recorder = Recorder()

    async def main() -> list[Any]:
        batcher = make(recorder, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        queued = asyncio.create_task(batcher.submit("k", ["a"]))
        await until(lambda: batcher.queue_depth == 1)
        await batcher.stop(drain=True, timeout=0.05)
        return [await settled(hold), await settled(queued)]

    results = run(main, recorder)
    assert all(isinstance(r, BatcherClosedError) for r in results)
    assert "a" not in recorder.seen


def test_stop_without_drain_fails_queued_at_once_and_lets_the_running_batch_finish() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        queued = asyncio.create_task(batcher.submit("k", ["a"]))
        await until(lambda: batcher.queue_depth == 1)
        stopping = asyncio.create_task(batcher.stop(drain=False, timeout=10))
        with pytest.raises(BatcherClosedError):
            await queued  # failed while the worker is still blocked
        assert not recorder.gate.is_set()
        recorder.gate.set()
        await stopping
        assert await hold == ["hold:HOLD"]

    run(main, recorder)
    assert "a" not in recorder.seen


def test_event_loop_stays_free_while_process_blocks() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)

        async def health() -> str:
            for _ in range(50):
                await asyncio.sleep(0)
            return "ok"

        assert await asyncio.wait_for(health(), 5) == "ok"
        assert not hold.done() and batcher.in_flight == 1  # process() was blocked the whole time
        recorder.gate.set()
        assert await hold == ["hold:HOLD"]
        await batcher.stop()

    run(main, recorder)


def test_max_batch_tokens_and_oversized_item() -> None:
    recorder = Recorder()
    stats: list[BatchStats] = []

    async def main() -> None:
        batcher = make(recorder, max_batch_size=10, max_batch_tokens=10, max_wait_ms=0, cost=len, on_batch=stats.append)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        tasks = [asyncio.create_task(batcher.submit("k", ["aaaa", "bbbb", "cccc", "x" * 30, "dd"]))]
        await until(lambda: batcher.queue_depth == 5)
        recorder.gate.set()
        await hold
        assert await tasks[0] == [expected("k", x) for x in ["aaaa", "bbbb", "cccc", "x" * 30, "dd"]]
        await batcher.stop()

    run(main, recorder)
    assert recorder.calls[1:] == [("k", ["aaaa", "bbbb"]), ("k", ["cccc"]), ("k", ["x" * 30]), ("k", ["dd"])]
    assert [s.tokens for s in stats[1:]] == [8, 4, 30, 2]


def test_keys_are_never_mixed_and_the_oldest_key_goes_first() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_batch_size=8, max_wait_ms=0)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        tasks = [
            asyncio.create_task(batcher.submit(k, [x]))
            for k, x in [("de-en", "b1"), ("en-de", "a1"), ("de-en", "b2"), ("en-de", "a2"), ("fr-en", "c1")]
        ]
        await until(lambda: batcher.queue_depth == 5)
        recorder.gate.set()
        await hold
        assert [await t for t in tasks] == [["de-en:B1"], ["en-de:A1"], ["de-en:B2"], ["en-de:A2"], ["fr-en:C1"]]
        await batcher.stop()

    run(main, recorder)
    assert recorder.calls[1:] == [("de-en", ["b1", "b2"]), ("en-de", ["a1", "a2"]), ("fr-en", ["c1"])]


def test_lifecycle_errors_and_empty_submit() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder)
        with pytest.raises(BatcherClosedError, match="start"):
            await batcher.submit("k", ["a"])
        await batcher.start()
        with pytest.raises(RuntimeError, match="already started"):
            await batcher.start()
        assert await batcher.submit("k", []) == []
        await batcher.stop()
        await batcher.stop()  # idempotent
        with pytest.raises(BatcherClosedError, match="shutting down"):
            await batcher.submit("k", ["a"])

    run(main)
    assert recorder.calls == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size must be a positive integer"),
        ({"max_batch_tokens": -5}, "max_batch_tokens must be a positive integer"),
        ({"max_queue_items": 0}, "max_queue_items must be a positive integer"),
        ({"max_batch_size": 2.5}, "max_batch_size must be a positive integer"),
        ({"max_wait_ms": -1}, "max_wait_ms must be a finite number >= 0"),
        ({"max_wait_ms": float("nan")}, "max_wait_ms must be a finite number >= 0"),
        ({"workers": 0}, "workers must be a positive integer"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BatcherConfig(**kwargs)
    assert BatcherConfig(max_wait_ms=0).max_wait_ms == 0


def test_two_workers_run_a_second_batch_while_the_first_is_held() -> None:
    recorder = Recorder()

    async def main() -> None:
        batcher = make(recorder, max_wait_ms=0, workers=2)
        await batcher.start()
        first = await hold_worker(batcher, recorder)  # worker 1 is blocked inside process()
        assert await batcher.submit("a", ["x", "y"]) == ["a:X", "a:Y"]  # worker 2 serves meanwhile
        assert recorder.max_active == 2 and len(recorder.threads) == 2
        assert not first.done() and batcher.in_flight == 1
        second = asyncio.create_task(batcher.submit("h2", ["hold"]))  # now both workers are blocked
        await until(lambda: batcher.in_flight == 2)
        third = asyncio.create_task(batcher.submit("c", ["w"]))
        await until(lambda: batcher.queue_depth == 1)
        await asyncio.sleep(0.05)
        assert not third.done() and batcher.queue_depth == 1  # no third worker
        recorder.gate.set()
        assert await first == ["hold:HOLD"] and await second == ["h2:HOLD"] and await third == ["c:W"]
        await batcher.stop()

    run(main, recorder)


def test_items_delivered_early_answer_their_request_before_the_batch_ends() -> None:
    gate = threading.Event()

    def process(key: str, items: list[str], deliver: Callable[[int, str], None]) -> list[str]:
        for i, item in enumerate(items):
            if item.startswith("quick"):
                deliver(i, f"early:{item}")
        assert gate.wait(10), "test never released the gate"
        return [f"late:{item}" for item in items]

    async def main() -> tuple[list[str], bool, list[str], list[str]]:
        batcher: DynamicBatcher[str, str, str] = DynamicBatcher(
            process, BatcherConfig(max_batch_size=4, max_wait_ms=10_000)
        )
        await batcher.start()
        quick = asyncio.create_task(batcher.submit("k", ["quick1", "quick2"]))
        mixed = asyncio.create_task(batcher.submit("k", ["quick3", "slow"]))
        slow = asyncio.create_task(batcher.submit("k", ["slow2"]))  # the fourth item fills the batch
        first = await asyncio.wait_for(quick, 5)  # answered while process() still holds the batch
        waiting = not mixed.done() and not slow.done()
        gate.set()
        out = first, waiting, await mixed, await slow
        await batcher.stop()
        return out

    try:
        first, waiting, mixed, slow = asyncio.run(main())
    finally:
        gate.set()
    assert first == ["early:quick1", "early:quick2"] and waiting
    assert mixed == ["early:quick3", "late:slow"]  # an item delivered early keeps that result
    assert slow == ["late:slow2"]


def test_a_bad_early_delivery_fails_the_batch_with_a_clear_error() -> None:
    def process(key: str, items: list[str], deliver: Callable[[int, str], None]) -> list[str]:
        deliver(len(items), "nowhere")
        return items

    async def main() -> Any:
        batcher: DynamicBatcher[str, str, str] = DynamicBatcher(process, BatcherConfig(max_wait_ms=0))
        await batcher.start()
        bad = await settled(batcher.submit("k", ["a", "b"]))
        await batcher.stop()
        return bad

    bad = run(main)
    assert isinstance(bad, ValueError) and "deliver() got item index 2; the batch has items 0 to 1" in str(bad)
