"""Static batching's turns: requests are served by cost in fair-queueing order (``DynamicBatcher._plan``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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


def test_a_small_request_keeps_its_items_together_within_a_quantum() -> None:
    recorder = Recorder()

    async def main() -> None:
        # quanta of 8 / 4 = 2 cost units: "a" (two items of cost 1) is one turn; "b" comes after it
        batcher = make(recorder, max_batch_size=2, max_batch_tokens=8, max_wait_ms=0, workers=1)
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
    assert recorder.calls[1:] == [("k", ["a1", "a2"]), ("k", ["b1"])]  # not a1, b1 then a2


def test_a_heavy_request_takes_turns_with_a_stream_of_small_ones_and_is_not_starved() -> None:
    calls: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stream: list[asyncio.Future[list[str]]] = []

        def arrive(n: int) -> None:
            stream.append(asyncio.ensure_future(batcher.submit("k", [f"s{n}"])))

        def process(key: str, items: list[str], deliver: Callable[[int, str], None]) -> list[str]:
            calls.extend(items)
            if len(calls) <= 12:  # each batch brings a newcomer, queued before the next batch is formed
                loop.call_soon_threadsafe(arrive, len(calls))
            return [x.upper() for x in items]

        config = BatcherConfig(max_batch_size=1, max_batch_tokens=8, max_wait_ms=0)
        batcher: DynamicBatcher[str, str, str] = DynamicBatcher(process, config, cost=lambda _: 2)
        await batcher.start()
        assert await batcher.submit("k", ["h0", "h1", "h2", "h3"]) == ["H0", "H1", "H2", "H3"]
        await until(lambda: len(stream) == 12)
        assert [await f for f in stream] == [[f"S{n}"] for n in range(1, 13)]
        await batcher.stop()

    run(main)
    # a newcomer waits behind the heavy request's next sentence, not all of it, and the heavy request is not pushed
    # back behind every newcomer (with turns counted from zero for each request it would be served last): fair
    # queueing, by each item's finish time on the batcher's clock, in turns of 8 / 4 = 2 cost units
    assert calls[:8] == ["h0", "h1", "s1", "h2", "s2", "s3", "h3", "s4"]
