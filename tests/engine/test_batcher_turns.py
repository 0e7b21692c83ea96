"""Static batching's turns: requests are served in fair-queueing order (``DynamicBatcher._in_turns``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from tests.engine.test_batcher import Recorder, expected, hold_worker, make, run, until
from transduce.engine.batcher import BatcherConfig, DynamicBatcher

pytestmark = pytest.mark.timeout(30)


def test_requests_take_turns_so_a_newcomer_goes_before_the_rest_of_a_heavy_request() -> None:
    recorder = Recorder()
    heavy = [f"h{i}" for i in range(10)]

    async def main() -> None:
        # items of cost 2 and turns in quanta of 8 / 4 = 2: every item is a turn of its own
        batcher = make(recorder, max_batch_size=4, max_batch_tokens=8, cost=lambda _: 2, max_wait_ms=0, workers=1)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        big = asyncio.create_task(batcher.submit("k", heavy))
        await until(lambda: batcher.queue_depth == 10)
        small = asyncio.create_task(batcher.submit("other", ["s"]))  # queued after all ten
        same = asyncio.create_task(batcher.submit("k", ["t"]))  # same key as the heavy request
        await until(lambda: batcher.queue_depth == 12)
        recorder.gate.set()
        await hold
        assert await big == [expected("k", x) for x in heavy]
        assert await small == ["other:S"] and await same == ["k:T"]
        await batcher.stop()

    run(main, recorder)
    # the heavy request's first item is the oldest; then each request in turn: "t" joins the heavy request's first
    # batch (same key), "s" goes as soon as the heavy request has had its turn, not after its ten items
    assert recorder.calls[1:] == [
        ("k", ["h0", "t", "h1", "h2"]),
        ("other", ["s"]),
        ("k", ["h3", "h4", "h5", "h6"]),
        ("k", ["h7", "h8", "h9"]),
    ]


@pytest.mark.parametrize("hold_cost", [1, 2])
def test_a_small_request_keeps_its_items_together_wherever_the_clock_stands(hold_cost: int) -> None:
    recorder = Recorder()

    async def main() -> None:
        # turns of 8 / 4 = 2 cost units or 8 / 4 = 2 items: "a" (two items of cost 1) is one turn, wherever the held
        # item leaves the clock (turns cut on the clock itself put a2 in the turn after a1's, behind b1, when the
        # held item cost 2)
        batcher = make(
            recorder,
            max_batch_size=8,
            max_batch_tokens=8,
            max_wait_ms=0,
            workers=1,
            cost=lambda x: hold_cost if x == "hold" else 1,
        )
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        first = asyncio.create_task(batcher.submit("k", ["a1", "a2"]))
        await until(lambda: batcher.queue_depth == 2)
        second = asyncio.create_task(batcher.submit("k", ["b1"]))
        await until(lambda: batcher.queue_depth == 3)
        recorder.gate.set()
        await hold
        assert await first == ["k:A1", "k:A2"] and await second == ["k:B1"]
        await batcher.stop()

    run(main, recorder)
    assert recorder.calls[1:] == [("k", ["a1", "a2", "b1"])]  # not a1, b1, a2


def test_a_turn_holds_a_quarter_of_a_batch_of_cheap_items_so_a_newcomer_waits_one_batch_at_most() -> None:
    recorder = Recorder()
    heavy = [f"h{i}" for i in range(20)]

    async def main() -> None:
        # items of cost 1 against turns of 4096 / 4 cost units: by cost alone all 20 would be one turn, five
        # batches ahead of the newcomer; a turn also ends at 4 / 4 = 1 item
        batcher = make(recorder, max_batch_size=4, max_batch_tokens=4096, max_wait_ms=0, workers=1)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        big = asyncio.create_task(batcher.submit("k", heavy))
        await until(lambda: batcher.queue_depth == 20)
        small = asyncio.create_task(batcher.submit("other", ["s"]))
        await until(lambda: batcher.queue_depth == 21)
        recorder.gate.set()
        await hold
        assert await small == ["other:S"] and len(await big) == 20
        await batcher.stop()

    run(main, recorder)
    assert recorder.calls[1:3] == [("k", ["h0", "h1", "h2", "h3"]), ("other", ["s"])]


def test_a_free_worker_takes_another_keys_full_batch_rather_than_wait_for_company() -> None:
    recorder = Recorder()

    async def main() -> float:
        batcher = make(recorder, max_batch_size=2, max_batch_tokens=8, max_wait_ms=2000, workers=1)
        await batcher.start()
        hold = await hold_worker(batcher, recorder)
        a = asyncio.create_task(batcher.submit("A", ["a"]))  # first in turn order, alone: it waits for company
        await until(lambda: batcher.queue_depth == 1)
        b = asyncio.create_task(batcher.submit("B", ["b1", "b2"]))  # a full batch
        await until(lambda: batcher.queue_depth == 3)
        started = time.monotonic()
        recorder.gate.set()
        await hold
        assert await b == ["B:B1", "B:B2"]
        waited = time.monotonic() - started
        assert await a == ["A:A"]
        await batcher.stop()
        return waited

    assert run(main, recorder) < 1.0  # not max_wait_ms (2 s) behind the lone item
    assert recorder.calls[1:] == [("B", ["b1", "b2"]), ("A", ["a"])]


def with_a_stream(
    key: str,
    newcomers: int,
    cost: Callable[[str], int],
    first: Callable[[DynamicBatcher[str, str, str]], Awaitable[None]],
) -> list[str]:
    """``first(batcher)`` on a batcher of one-item batches where each batch brings a newcomer of ``key`` (queued
    before the next batch is formed), ``newcomers`` in all; the items in the order they were processed."""
    calls: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stream: list[asyncio.Future[list[str]]] = []

        def arrive(n: int) -> None:
            stream.append(asyncio.ensure_future(batcher.submit(key, [f"{key}{n}"])))

        def process(_: str, items: list[str], deliver: Callable[[int, str], None]) -> list[str]:
            calls.extend(items)
            if len(calls) <= newcomers:
                loop.call_soon_threadsafe(arrive, len(calls))
            return [x.upper() for x in items]

        config = BatcherConfig(max_batch_size=1, max_batch_tokens=8, max_wait_ms=0)
        batcher: DynamicBatcher[str, str, str] = DynamicBatcher(process, config, cost=cost)
        await batcher.start()
        await first(batcher)
        await until(lambda: len(stream) == newcomers)
        assert [await f for f in stream] == [[f"{key.upper()}{n}"] for n in range(1, newcomers + 1)]
        await batcher.stop()

    run(main)
    return calls


def test_items_of_no_cost_still_move_the_clock_so_an_older_item_is_not_starved() -> None:
    async def first(batcher: DynamicBatcher[str, str, str]) -> None:
        head = asyncio.ensure_future(batcher.submit("z", ["z0"]))  # queued first, decoded first
        x = asyncio.ensure_future(batcher.submit("x", ["x"]))
        assert await x == ["X"] and await head == ["Z0"]

    calls = with_a_stream("z", 20, lambda x: 0 if x.startswith("z") else 8, first)
    assert calls.index("x") < 8  # with free items not moving the clock it went after all 20


def test_a_heavy_request_takes_turns_with_a_stream_of_small_ones_and_is_not_starved() -> None:
    async def first(batcher: DynamicBatcher[str, str, str]) -> None:
        assert await batcher.submit("k", ["h0", "h1", "h2", "h3"]) == ["H0", "H1", "H2", "H3"]

    calls = with_a_stream("s", 12, lambda _: 2, first)
    # a newcomer waits behind the heavy request's next sentence, not all of it, and the heavy request is not pushed
    # back behind every newcomer (with turns counted from zero for each request it would be served last): fair
    # queueing, by each item's finish time on the batcher's clock, in turns of 8 / 4 = 2 cost units
    assert calls[:8] == ["h0", "h1", "s1", "h2", "s2", "s3", "h3", "s4"]
