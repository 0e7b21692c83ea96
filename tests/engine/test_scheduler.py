"""The step scheduler on the tiny model: outputs equal standalone decoding through joins and leaves, fairness,
cancellation, deadlines, queue limits and shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from transduce.engine.errors import (
    BatcherClosedError,
    DeadlineExceededError,
    InputTooLongError,
    QueueFullError,
    RequestTooLargeError,
)
from transduce.engine.options import (
    TOKENS_IN_FLIGHT_CPU,
    TOKENS_IN_FLIGHT_CUDA,
    DecodeOptions,
    SchedulerConfig,
)
from transduce.engine.runner import DecoderState
from transduce.engine.scheduler import StepScheduler, StepStats
from transduce.engine.slots import Timed
from transduce.engine.translator import Translator

pytestmark = pytest.mark.anyio
EN = ["Hello world.", "The cat sees the dog.", "A big red house.", "Good night, old world!", "The small dog runs."]
DE = ["Hallo Welt.", "Die Katze sieht den Hund.", "Ein grosses rotes Haus.", "Gute Nacht!", "Der Hund rennt."]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def running(
    translator: Translator, stamps: list[float] | None = None, **config: Any
) -> AsyncIterator[tuple[StepScheduler, list[StepStats]]]:
    """A started scheduler and the steps it reports (``stamps``: when each was reported, monotonic seconds)."""
    steps: list[StepStats] = []

    def on_step(stats: StepStats) -> None:
        steps.append(stats)
        if stamps is not None:
            stamps.append(time.monotonic())

    scheduler = StepScheduler(translator, SchedulerConfig(**config), on_step=on_step)
    await scheduler.start()
    try:
        yield scheduler, steps
    finally:
        await scheduler.stop(drain=False, timeout=10)


def standalone(translator: Translator, texts: list[str], source: str, target: str, options: DecodeOptions) -> list:
    return [r.tokens for r in translator.translate(texts, source_lang=source, target_lang=target, options=options)]


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("batch_size", [2, 32])
async def test_outputs_equal_standalone_decoding_through_joins_and_leaves(
    tiny_translator: Translator, batch_size: int
) -> None:
    """Greedy and beam, both directions, n-best: requests arrive while others decode, sentences join and leave."""
    await joins_and_leaves_match_standalone(tiny_translator, batch_size)


@pytest.mark.parametrize("batch_size", [2, 32])
async def test_with_a_shortlist_outputs_equal_standalone_decoding_through_joins_and_leaves(
    shortlist_model_dir: Path, batch_size: int
) -> None:
    """The running batch scores the union of its cohorts' candidates, rebuilt as cohorts join and leave; each row
    keeps its own sentence's, so outputs equal decoding each request alone (whose candidates are its own)."""
    translator = Translator(shortlist_model_dir, device="cpu", intra_threads=1)
    assert translator.runner.sessions.shortlist_masks
    widths: list[int] = []
    step = translator.runner.step

    def recording(tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        log_probs = step(tokens, state)
        if threading.current_thread().name == "transduce-scheduler":  # not the standalone reference runs
            widths.append(log_probs.shape[1])
        return log_probs

    translator.runner.step = recording  # type: ignore[method-assign]
    await joins_and_leaves_match_standalone(translator, batch_size)
    assert min(widths) > 0 and max(widths) < translator.manifest.vocab_size  # candidates only
    changes = list(zip(widths, widths[1:], strict=False))
    assert any(b > a for a, b in changes) and any(b < a for a, b in changes)  # grew on joins, shrank on leaves


async def test_with_a_shortlist_a_failed_join_leaves_the_running_sentences_as_they_were(
    shortlist_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Merging newcomers fails (e.g. out of memory): they fail, and the sentence already decoding goes on over its
    own candidates, translating as it would alone."""
    translator = Translator(shortlist_model_dir, device="cpu", intra_threads=1)
    merge = translator.runner.merge
    calls = 0

    def failing_once(state: DecoderState, other: DecoderState) -> DecoderState:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise MemoryError("out of memory (simulated)")
        return merge(state, other)

    queued = threading.Event()  # the newcomer is in the queue: the first sentence may take its second step
    step, steps_taken = translator.runner.step, 0

    def held(tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        nonlocal steps_taken
        steps_taken += 1
        if steps_taken == 2:  # so the join always happens mid-decode, however fast the first sentence decodes
            assert queued.wait(10), "the newcomer was never queued"
        return step(tokens, state)

    monkeypatch.setattr(translator.runner, "merge", failing_once)
    monkeypatch.setattr(translator.runner, "step", held)
    options = DecodeOptions(beam_size=1, max_decoding_length=12, min_decoding_length=12)  # decodes 12 steps
    async with running(translator, max_batch_size=4, join_every_steps=1) as (scheduler, steps):
        first = asyncio.create_task(scheduler.submit(EN[1:2], source_lang="en", target_lang="de", options=options))
        await wait_for(lambda: steps_taken >= 2)  # the scheduler holds the first sentence after one step
        second = asyncio.create_task(scheduler.submit(DE[:1], source_lang="de", target_lang="en", options=options))
        await wait_for(lambda: scheduler.queue_depth >= 1)
        queued.set()
        with pytest.raises(MemoryError, match="simulated"):
            await asyncio.wait_for(second, 10)
        timed = await asyncio.wait_for(first, 30)
        assert calls == 1 and not scheduler.closed
    assert [t.result.tokens for t in timed] == standalone(translator, EN[1:2], "en", "de", options)


async def joins_and_leaves_match_standalone(translator: Translator, batch_size: int) -> list[StepStats]:
    """Greedy and beam, both directions, n-best, requests arriving while others decode; returns the steps."""
    cases = [
        (EN, "en", "de", DecodeOptions(beam_size=1)),
        (DE, "de", "en", DecodeOptions(beam_size=3, num_hypotheses=2, return_scores=True)),
        (EN[::-1], "en", "de", DecodeOptions(beam_size=3)),
        (DE[:2], "de", "en", DecodeOptions(beam_size=1, max_decoding_length=4)),
        # a long source that leaves after 2 steps: the others go on with the batch's source padding trimmed off
        ([" ".join(EN * 3)], "en", "de", DecodeOptions(beam_size=1, max_decoding_length=2)),
        (EN[:3], "en", "de", DecodeOptions(beam_size=1)),
        # the repeat guard, greedy and beam: its bans read each row's own history only
        (EN[1:4], "en", "de", DecodeOptions(beam_size=1, no_repeat_ngram_size=2)),
        (DE[2:], "de", "en", DecodeOptions(beam_size=3, num_hypotheses=2, no_repeat_ngram_size=3)),
        # the options of a lane that others followed: the newcomers' rows move up to their lane's
        (DE[:3], "de", "en", DecodeOptions(beam_size=3)),
        (EN[2:], "en", "de", DecodeOptions(beam_size=1)),
    ]
    async with running(translator, max_batch_size=batch_size) as (scheduler, steps):
        tasks = []
        for texts, source, target, options in cases:
            tasks.append(
                asyncio.create_task(scheduler.submit(texts, source_lang=source, target_lang=target, options=options))
            )
            await wait_for(lambda: len(steps) >= 2 * len(tasks))  # the next request joins a batch mid-decode
        results = await asyncio.gather(*tasks)
    for (texts, source, target, options), timed in zip(cases, results, strict=True):
        assert [t.result.tokens for t in timed] == standalone(translator, texts, source, target, options)
        assert all(t.started <= t.finished for t in timed)
        if options.return_scores:
            expected = translator.translate(texts, source_lang=source, target_lang=target, options=options)
            for t, e in zip(timed, expected, strict=True):
                assert t.result.scores == pytest.approx(e.scores, abs=1e-4)
    assert max(s.active for s in steps) <= batch_size
    assert sum(s.finished for s in steps) == sum(len(c[0]) for c in cases)
    return steps


async def test_a_short_request_starts_within_a_few_steps_behind_a_heavy_one(tiny_translator: Translator) -> None:
    heavy = [f"{EN[i % 5]} {EN[(i + 1) % 5]} {EN[(i + 2) % 5]}" for i in range(24)]
    options = DecodeOptions(beam_size=3)
    stamps: list[float] = []
    async with running(tiny_translator, stamps, max_batch_size=4) as (scheduler, steps):
        big = asyncio.create_task(scheduler.submit(heavy, source_lang="en", target_lang="de", options=options))
        await wait_for(lambda: len(steps) >= 5)
        assert scheduler.in_flight == 3  # one request holds 3 of the 4 places (request_share 0.75)
        (short,) = await scheduler.submit(["Hello world."], source_lang="en", target_lang="de")
        # steps that ran while it was queued, counted by the scheduler from when it entered the queue (the heavy
        # request steps on while this coroutine tokenises or waits for the interpreter, and those do not count)
        # started within a few steps: at the next join, at most join_every_steps after the last one (+1: the step
        # count is read while a step may be running), not after the heavy request's hundreds of steps
        assert short.steps_queued <= SchedulerConfig().join_every_steps + 1
        assert scheduler.queue_depth >= 10 and not big.done()  # the heavy request is far from done
        big.cancel()
    assert short.result.tokens == standalone(tiny_translator, ["Hello world."], "en", "de", DecodeOptions())[0]


async def test_a_cancelled_request_leaves_the_queue_and_the_running_batch(tiny_translator: Translator) -> None:
    async with running(tiny_translator, max_batch_size=4) as (scheduler, steps):
        doomed = asyncio.create_task(scheduler.submit(EN * 3, source_lang="en", target_lang="de"))
        await wait_for(lambda: scheduler.in_flight == 3)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        await wait_for(lambda: scheduler.in_flight == 0 and scheduler.queue_depth == 0)
        left = len(steps)
        other = await scheduler.submit(DE[:2], source_lang="de", target_lang="en")
        assert [t.result.tokens for t in other] == standalone(tiny_translator, DE[:2], "de", "en", DecodeOptions())
        assert sum(s.active for s in steps[left:]) <= sum(len(t.result.tokens[0]) + 1 for t in other) * 2


async def test_deadline_passes_and_the_sentences_are_dropped(tiny_translator: Translator) -> None:
    loop = asyncio.get_running_loop()
    async with running(tiny_translator, max_batch_size=1) as (scheduler, _):
        with pytest.raises(DeadlineExceededError):
            await scheduler.submit(EN * 4, source_lang="en", target_lang="de", deadline=loop.time() + 0.05)
        await wait_for(lambda: scheduler.in_flight == 0 and scheduler.queue_depth == 0)
        with pytest.raises(DeadlineExceededError, match="before it was queued"):
            await scheduler.submit(EN, source_lang="en", target_lang="de", deadline=loop.time() - 1)


async def test_queue_limits_and_closed(tiny_translator: Translator, monkeypatch: pytest.MonkeyPatch) -> None:
    step = tiny_translator.runner.step

    def slow_step(tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        time.sleep(0.02)  # the queue must still hold the first request's sentences when the second one comes
        return step(tokens, state)

    monkeypatch.setattr(tiny_translator.runner, "step", slow_step)
    async with running(tiny_translator, max_batch_size=1, max_queue_items=4) as (scheduler, _):
        with pytest.raises(RequestTooLargeError):
            await scheduler.submit(EN, source_lang="en", target_lang="de")
        first = asyncio.create_task(scheduler.submit(EN[:4], source_lang="en", target_lang="de"))
        await wait_for(lambda: scheduler.in_flight == 1)
        with pytest.raises(QueueFullError):
            await scheduler.submit(EN[:2], source_lang="en", target_lang="de")
        assert len(await first) == 4
        assert await scheduler.submit([], source_lang="en", target_lang="de") == []
    with pytest.raises(BatcherClosedError):
        await scheduler.submit(EN, source_lang="en", target_lang="de")
    with pytest.raises(ValueError, match="max_batch_size"):
        SchedulerConfig(max_batch_size=0)


def test_the_token_budget_is_the_devices_when_left_to_auto(tiny_translator: Translator) -> None:
    assert SchedulerConfig().max_tokens_in_flight == 0  # auto
    assert SchedulerConfig().for_device(cuda=False).max_tokens_in_flight == TOKENS_IN_FLIGHT_CPU == 2048
    assert SchedulerConfig().for_device(cuda=True).max_tokens_in_flight == TOKENS_IN_FLIGHT_CUDA == 8192
    assert SchedulerConfig(max_tokens_in_flight=500).for_device(cuda=True).max_tokens_in_flight == 500  # as set
    assert StepScheduler(tiny_translator).config.max_tokens_in_flight == TOKENS_IN_FLIGHT_CPU  # a CPU engine
    with pytest.raises(ValueError, match=r"max_tokens_in_flight must be 0 \(auto\) or a positive integer"):
        SchedulerConfig(max_tokens_in_flight=-1)


async def test_stop_drains_accepted_work(tiny_translator: Translator) -> None:
    scheduler = StepScheduler(tiny_translator, SchedulerConfig(max_batch_size=2))
    await scheduler.start()
    task = asyncio.create_task(scheduler.submit(EN, source_lang="en", target_lang="de"))
    await wait_for(lambda: scheduler.in_flight > 0)
    await scheduler.stop(drain=True, timeout=30)
    assert len(await task) == 5 and scheduler.closed


async def test_the_io_binding_runner_merges_and_trims_the_same(
    tiny_model_dir: Any, tiny_translator: Translator
) -> None:
    """The device-resident runner (run here on the CPU provider) joins sentences into a running batch too."""
    from transduce.engine.iobinding_runner import IOBindingRunner

    bound = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    bound.runner = bound.runners[0] = IOBindingRunner(bound.runner.sessions)
    options = DecodeOptions(beam_size=2)
    async with running(bound, max_batch_size=3) as (scheduler, steps):
        first = asyncio.create_task(scheduler.submit(EN, source_lang="en", target_lang="de", options=options))
        await wait_for(lambda: len(steps) >= 3)
        second = await scheduler.submit(DE, source_lang="de", target_lang="en", options=options)
        assert [t.result.tokens for t in await first] == standalone(tiny_translator, EN, "en", "de", options)
    assert [t.result.tokens for t in second] == standalone(tiny_translator, DE, "de", "en", options)


async def test_newcomers_join_a_busy_batch_in_groups(tiny_translator: Translator) -> None:
    """While the batch is busy, a join waits for join_min_free places or join_every_steps steps."""
    options = DecodeOptions(beam_size=1)
    busy = [" ".join(EN[i:] + EN[:i]) * 2 for i in range(3)]  # long sources: about 200 steps each (the tiny model
    # rarely ends a sentence itself), so the batch is still busy when the newcomer arrives
    async with running(tiny_translator, max_batch_size=4, join_min_free=4, join_every_steps=10**6) as (scheduler, _):
        first = asyncio.create_task(scheduler.submit(busy, source_lang="en", target_lang="de", options=options))
        await wait_for(lambda: scheduler.in_flight == 3)
        second = await scheduler.submit(EN[3:4], source_lang="en", target_lang="de", options=options)
        done = await first
    assert second[0].started >= max(t.finished for t in done)  # 1 place free of 4: it waited for the batch to empty
    async with running(tiny_translator, max_batch_size=4, join_min_free=4, join_every_steps=3) as (scheduler, steps):
        first = asyncio.create_task(scheduler.submit(busy, source_lang="en", target_lang="de", options=options))
        await wait_for(lambda: scheduler.in_flight == 3)
        at = len(steps)
        second = await scheduler.submit(EN[3:4], source_lang="en", target_lang="de", options=options)
        done = await first
    assert second[0].started < min(t.finished for t in done)  # it joined the busy batch
    assert [s.active for s in steps[at : at + 5]].count(4) >= 1  # within join_every_steps steps of arriving
    assert second[0].result.tokens == standalone(tiny_translator, EN[3:4], "en", "de", options)[0]


async def test_a_long_sentence_is_not_starved_by_a_stream_of_short_ones(tiny_translator: Translator) -> None:
    """The long sentence fits only into an empty batch; clients keep it busy with short ones, one after another."""
    options = DecodeOptions(beam_size=1)
    long = " ".join(EN)
    cost = len(tiny_translator.tokenizer.encode_source(long, "de"))
    budget = cost + 4  # every short sentence costs more than 4: the long one needs the batch to itself
    stop = False
    stepped: list[float] = []  # when each step ended (the worker's clock, not the event loop's)
    config = SchedulerConfig(max_batch_size=8, max_tokens_in_flight=budget, starve_steps=6, join_every_steps=2)
    scheduler = StepScheduler(tiny_translator, config, on_step=lambda _: stepped.append(time.monotonic()))

    shorts: list[tuple[float, Timed]] = []  # when each short request was sent, and its sentence's timing

    async def client(i: int) -> None:
        while not stop:
            sent = time.monotonic()
            (short,) = await scheduler.submit([EN[i % 5]], source_lang="en", target_lang="de", options=options)
            shorts.append((sent, short))

    await scheduler.start()
    try:
        clients = [asyncio.create_task(client(i)) for i in range(6)]
        await wait_for(lambda: len(stepped) >= 10)
        (timed,) = await asyncio.wait_for(
            scheduler.submit([long], source_lang="en", target_lang="de", options=options), 60
        )
        stop = True
        await asyncio.gather(*clients)
    finally:
        await scheduler.stop(drain=False, timeout=10)
    sources = [len(tiny_translator.tokenizer.encode_source(t, "de")) for t in EN]
    longest_short = max(options.max_lengths(sources, 10**6))
    # steps it waited in the queue: its first admission attempt (join_every_steps), starve_steps, the drain for the
    # short sentences starved before it arrived (the budget is so tight that some always are; they are older, so
    # they go first; here they fit beside each other in one drain, though five could cost more than the budget and
    # chain drains, which a review's 6,000 simulated runs never did), the longest run of a sentence admitted just
    # before admissions stopped for it, the admission after the step that emptied the batch, and 1 because the step
    # count is read while a step may be running (unguarded, it waited 30,000 steps here; 45-47 on a busy machine
    # when short sentences blocked at the same step as it went first one at a time, each admitted beside others)
    assert timed.steps_queued <= 2 + 6 + longest_short + longest_short + 1 + 1
    # once it starved, the batch drained for it: no short sentence sent after that started before it did
    queued_at = sum(1 for t in stepped if t <= timed.started) - timed.steps_queued  # steps done when it was queued
    starved_by = stepped[min(queued_at + 2 + 6 + 1, len(stepped) - 1)]
    assert not [short for sent, short in shorts if sent > starved_by and short.started < timed.started]
    assert [timed.result.tokens[0]] == standalone(tiny_translator, [long], "en", "de", options)[0]


async def test_a_sentence_capped_at_one_piece_joins_a_running_batch_without_failing_it(
    tiny_translator: Translator,
) -> None:
    """A ratio under 1 and no extra length give a short source a cap of 1 (it was 0, refused by the search after the
    newcomer's rows were merged: the request running beside it failed at the next step)."""
    long = DecodeOptions(beam_size=1, min_decoding_length=20, max_decoding_length=20)
    tight = DecodeOptions(beam_size=1, max_length_ratio=0.3, extra_decoding_length=0)
    short = [t for t in ("a", ".", "Ja", "Haus") if len(tiny_translator.tokenizer.encode_source(t, "en")) <= 3][:1]
    assert short  # tag, piece, eos: a cap of int(0.3 * 3) + 0 = 0 before
    async with running(tiny_translator, join_every_steps=1) as (scheduler, steps):
        first = asyncio.create_task(scheduler.submit(EN[:1], source_lang="en", target_lang="de", options=long))
        await wait_for(lambda: len(steps) >= 3)
        second = await asyncio.wait_for(
            scheduler.submit(["Haus"], source_lang="de", target_lang="en", options=tight), 30
        )
        running_one = await asyncio.wait_for(first, 30)
    assert [t.result.tokens for t in running_one] == standalone(tiny_translator, EN[:1], "en", "de", long)
    assert [t.result.tokens for t in second] == standalone(tiny_translator, short, "de", "en", tight)
    assert len(second[0].result.tokens[0]) == 1


async def test_a_sentence_over_the_models_source_limit_is_refused_at_submit(tiny_translator: Translator) -> None:
    """As translate() refuses it, before it is queued: encoded with others, it failed their request too."""
    limit = tiny_translator.max_source_tokens
    over = " ".join(["word"] * (limit + 5))
    async with running(tiny_translator) as (scheduler, _):
        others = asyncio.create_task(scheduler.submit(EN[:2], source_lang="en", target_lang="de"))
        with pytest.raises(InputTooLongError, match=f"the model accepts at most {limit}"):
            await scheduler.submit([EN[2], over], source_lang="en", target_lang="de")
        done = await asyncio.wait_for(others, 30)
        assert scheduler.queue_depth == 0
    assert [t.result.tokens for t in done] == standalone(tiny_translator, EN[:2], "en", "de", DecodeOptions())


async def test_an_encoder_failure_fails_only_its_request(
    tiny_model_dir: Any, tiny_translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    translator = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    encode = translator.runner.encode
    calls = 0

    def failing_once(ids: Any, mask: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("out of memory (simulated)")
        return encode(ids, mask)

    monkeypatch.setattr(translator.runner, "encode", failing_once)
    async with running(translator, max_batch_size=4) as (scheduler, _):
        with pytest.raises(RuntimeError, match="simulated"):
            await asyncio.wait_for(scheduler.submit(EN[:2], source_lang="en", target_lang="de"), 10)
        assert not scheduler.closed
        after = await asyncio.wait_for(scheduler.submit(DE[:2], source_lang="de", target_lang="en"), 30)
        assert scheduler.queue_depth == 0 and scheduler.in_flight == 0
    assert [t.result.tokens for t in after] == standalone(tiny_translator, DE[:2], "de", "en", DecodeOptions())
