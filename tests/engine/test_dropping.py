"""Static batching drops the sentences nobody waits for any more at the next decoder step (the scheduler issue: "a
request that disconnects or times out has its queued and running sentences dropped at the next step"): the engine's
``dropped`` hook, the batcher's ``Delivery.abandoned``, and the two through the app with the tiny model."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.engine.test_translator import SENTENCES, rows_per_step
from tests.service.harness import EN_DE, post_then_hang_up, serve, wait_until
from transduce.engine.batcher import BatcherConfig, Delivery, DynamicBatcher
from transduce.engine.errors import DeadlineExceededError
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("shortlist", [False, True])
def test_dropped_sentences_leave_the_batch_and_the_others_are_unchanged(
    tiny_translator: Translator,
    shortlist_model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    beam_size: int,
    shortlist: bool,
) -> None:
    translator = Translator(shortlist_model_dir, device="cpu") if shortlist else tiny_translator
    options = DecodeOptions(beam_size=beam_size, num_hypotheses=2 if beam_size > 1 else 1, return_scores=True)
    texts = [*SENTENCES, "  "]  # a blank input is answered without decoding, whatever dropped() says of it
    undisturbed = translator.translate(texts, source_lang="en", target_lang="de", options=options)
    rows = rows_per_step(translator, monkeypatch)
    early: list[int] = []
    results = translator.translate(
        texts,
        source_lang="en",
        target_lang="de",
        options=options,
        on_result=lambda i, r: early.append(i),
        dropped=lambda: [1, 4, 7] if len(rows) >= 2 else [],  # after the second step
    )
    assert results[1].hypotheses == [] and results[4].hypotheses == []
    assert 1 not in early and 4 not in early
    kept = [0, 2, 3, 5, 6, 7]
    assert [(results[i].hypotheses, results[i].tokens) for i in kept] == [
        (undisturbed[i].hypotheses, undisturbed[i].tokens) for i in kept
    ]
    scores = [s for i in kept for s in results[i].scores]
    assert scores == pytest.approx([s for i in kept for s in undisturbed[i].scores], abs=1e-5)
    # sentences 1 and 4 (the tiny random model decodes them to the length cap) left the state before the third step
    assert rows[2] <= rows[1] - 2 * beam_size, rows[:4]


def test_sentences_dropped_before_their_chunk_starts_are_not_decoded(
    tiny_translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = rows_per_step(tiny_translator, monkeypatch)
    options = DecodeOptions(beam_size=2)
    results = tiny_translator.translate(
        SENTENCES[:4], source_lang="en", target_lang="de", options=options, dropped=lambda: [1]
    )
    assert results[1].hypotheses == [] and all(r.hypotheses for i, r in enumerate(results) if i != 1)
    assert rows[0] == 3  # three sentences (one row each at the first step): the dropped one never joined
    rows.clear()
    none = tiny_translator.translate(SENTENCES[:2], source_lang="en", target_lang="de", dropped=lambda: [0, 1])
    assert [r.hypotheses for r in none] == [[], []] and rows == []


def test_a_result_handed_over_before_the_deadline_is_delivered_and_one_never_computed_is_not() -> None:
    """The worker delivers item 0 and then finds the deadline passed while the loop was busy: item 0's result is on
    its way and stands (the loop decides, as before); item 1 is given up, and its late result is ignored."""

    async def main() -> tuple[list[int], list[Any]]:
        loop = asyncio.get_running_loop()
        requests = [
            SimpleNamespace(future=loop.create_future(), deadline=time.monotonic() + 60, deliver=None),
            SimpleNamespace(future=loop.create_future(), deadline=time.monotonic() + 60, deliver=None),
        ]
        got: list[Any] = []
        for r in requests:
            r.deliver = lambda index, result: got.append(result)
        batch = [SimpleNamespace(request=r, index=0) for r in requests]
        delivery: Delivery[Any, Any, Any] = Delivery(batch, loop)  # type: ignore[arg-type]
        delivery(0, "computed")  # queued on the loop, not run yet
        for r in requests:
            r.deadline = time.monotonic() - 1  # the deadline passes while the loop is busy
        given_up = delivery.abandoned()
        delivery(1, "too late")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return given_up, got

    given_up, got = asyncio.run(main())
    assert given_up == [1] and got == ["computed"]


def test_the_batcher_tells_process_which_items_were_abandoned() -> None:
    """A request cancelled (client gone) and one past its deadline while their batch runs: ``abandoned()`` names
    their items, no result of theirs is delivered, and the others are answered."""
    seen: list[list[int]] = []
    release = threading.Event()

    def process(key: str, items: list[str], deliver: Any) -> list[str]:
        assert isinstance(deliver, Delivery)
        end = time.monotonic() + 10
        while time.monotonic() < end and len(deliver.abandoned()) < 3:
            release.wait(0.005)
        seen.append(sorted(deliver.abandoned()))
        for i, item in enumerate(items):
            deliver(i, item.upper())  # abandoned ones are ignored
        return [item.upper() for item in items]

    async def main() -> tuple[Any, ...]:
        batcher: DynamicBatcher[str, str, str] = DynamicBatcher(process, BatcherConfig(max_wait_ms=50))
        await batcher.start()
        gone = asyncio.ensure_future(batcher.submit("k", ["a", "b"]))
        late = asyncio.ensure_future(batcher.submit("k", ["c"], deadline=time.monotonic() + 0.3))
        kept = asyncio.ensure_future(batcher.submit("k", ["d"]))
        await wait_until(lambda: batcher.in_flight == 4)
        gone.cancel()
        answers = await asyncio.gather(gone, late, kept, return_exceptions=True)
        await batcher.stop()
        return tuple(answers)

    gone, late, kept = asyncio.run(main())
    assert isinstance(gone, asyncio.CancelledError) and isinstance(late, DeadlineExceededError)
    assert kept == ["D"] and seen == [[0, 1, 2]]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_client_gone_mid_decode_stops_its_static_batch(
    tiny_translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the app with static batching: the tiny random model decodes a long beam-3 text to the length cap;
    the client hangs up once its batch has taken a decoder step, and the engine stops decoding it at the next step."""
    text = " ".join(SENTENCES * 3)
    stepped = threading.Event()  # (waiting for the batch to start was not enough: under load it could be dropped
    real_step = tiny_translator.runner.step  # before its first step, and the test saw 0 steps)

    def step(tokens: Any, state: Any) -> Any:
        stepped.set()
        return real_step(tokens, state)

    monkeypatch.setattr(tiny_translator.runner, "step", step)
    full_steps = 0
    for hang_up in (False, True):
        async with serve(tiny_translator, scheduler="static", max_batch_size=32) as (client, app):
            queue, stats = app.state.transduce.pipeline.queue, tiny_translator.stats
            await wait_until(lambda q=queue: q.in_flight == 0)  # type: ignore[misc]  # the canary's batch has ended
            before = stats.decoder_steps
            if hang_up:
                stepped.clear()
                call, hung_up = post_then_hang_up(app, {"q": text, **EN_DE, "beam_size": 3})
                await wait_until(stepped.is_set)  # its batch decodes
                hung_up.set()
                await asyncio.wait_for(call, 10)
                await wait_until(lambda q=queue: q.in_flight == 0, 30)  # type: ignore[misc]
                dropped_steps = stats.decoder_steps - before
            else:
                r = await client.post("/translate", json={"q": text, **EN_DE, "beam_size": 3})
                assert r.status_code == 200
                full_steps = stats.decoder_steps - before
    assert 0 < dropped_steps < full_steps / 2, (dropped_steps, full_steps)
