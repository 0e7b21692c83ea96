"""Memory handed back once the server is idle (``idle_release_s``): once per idle spell, never while a request is
in work, never with 0."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.service.harness import EN_DE, Gate, serve
from transduce.service import idle
from transduce.service.config import Settings

pytestmark = pytest.mark.anyio
PERIOD_S = 0.3


@pytest.fixture
def releases(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When the idle release ran (monotonic times), instead of releasing this test process's memory."""
    ran: list[float] = []
    monkeypatch.setattr(idle, "release_memory", lambda: ran.append(time.monotonic()))
    return ran


async def test_memory_is_released_once_per_idle_spell_and_never_while_a_request_is_in_work(
    releases: list[float],
) -> None:
    gate = Gate()
    async with serve(gate=gate, idle_release_s=PERIOD_S) as (client, app):
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 1  # once after start-up (what loading left), then nothing to hand back
        gate.hold()
        held = asyncio.create_task(client.post("/translate", json={"q": "Hello world.", **EN_DE}))
        await gate.wait_entered()
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 1  # a request in work for longer than the idle period: no release
        gate.release()
        assert (await held).status_code == 200
        await asyncio.sleep(PERIOD_S * 3)
        ended = app.state.transduce.last_translation  # when the middleware saw it end
        assert len(releases) == 2 and releases[1] - ended >= PERIOD_S  # a whole idle period after it ended
        for _ in range(3):  # requests closer together than the period: one spell, one release after it
            r = await client.post("/detect", data={"q": "Hello world."})
            assert r.status_code == 200, r.text
            await asyncio.sleep(PERIOD_S / 3)
        assert len(releases) == 2
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 3
        for _ in range(3):  # requests that translate nothing (health checks, metrics) keep nothing awake
            assert (await client.get("/health/ready")).status_code == 200
        for _ in range(3):  # nor do refused ones: the engine never saw them
            assert (await client.post("/translate", json={"q": "Hello world."})).status_code == 422
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 3


async def test_the_first_release_counts_idle_time_from_start_up(
    releases: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """Before any work, a server is idle since it started (the log said "idle for 41162.7 s", the clock's age)."""
    with caplog.at_level(logging.INFO, logger="transduce.service"):
        async with serve(idle_release_s=PERIOD_S):
            await asyncio.sleep(PERIOD_S * 3)
    found = re.search(r"idle for ([0-9.]+) s", caplog.text)
    assert len(releases) == 1 and found and float(found[1]) < PERIOD_S * 10, caplog.text


async def test_zero_never_releases(releases: list[float]) -> None:
    async with serve(idle_release_s=0) as (client, _):
        assert (await client.post("/translate", json={"q": "Hello world.", **EN_DE})).status_code == 200
        await asyncio.sleep(0.5)
    assert releases == []


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_a_bad_idle_period_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="idle_release_s"):
        Settings(idle_release_s=bad)


def _idle_state(**pool: Any) -> Any:
    """What ``release_when_idle`` reads of the app's state: no request ever, a model pool as given."""
    settings = SimpleNamespace(idle_release_s=PERIOD_S)
    return SimpleNamespace(
        settings=settings,
        translating=0,
        file_jobs=0,
        last_translation=0.0,
        pool=SimpleNamespace(**pool),
    )


async def test_no_release_while_a_model_loads_and_one_after_it() -> None:
    """A load outlives the request that asked for it (a 504 at the deadline) and /admin/reload loads outside any
    request: the release waits for it, then comes a whole period after it ended."""
    state = _idle_state(loading=True, last_load_end=0.0)
    ran: list[float] = []
    task = asyncio.create_task(idle.release_when_idle(state, lambda: ran.append(time.monotonic())))
    try:
        await asyncio.sleep(PERIOD_S * 3)
        assert ran == []
        state.pool.loading, state.pool.last_load_end = False, time.monotonic()
        await asyncio.sleep(PERIOD_S * 3)
        assert len(ran) == 1 and ran[0] - state.pool.last_load_end >= PERIOD_S
    finally:
        task.cancel()


async def test_a_failed_release_is_logged_and_the_next_spell_releases(caplog: pytest.LogCaptureFixture) -> None:
    state = _idle_state(loading=False, last_load_end=0.0)
    ran: list[int] = []

    def release() -> None:
        ran.append(1)
        if len(ran) == 1:
            raise RuntimeError("no memory to hand back")

    task = asyncio.create_task(idle.release_when_idle(state, release))
    try:
        with caplog.at_level(logging.ERROR, logger="transduce.service"):
            await asyncio.sleep(PERIOD_S * 3)
        assert ran == [1] and "the idle release failed" in caplog.text and "no memory to hand back" in caplog.text
        assert not task.done()  # the task goes on
        state.last_translation = time.monotonic()  # a request, then another idle spell
        await asyncio.sleep(PERIOD_S * 3)
        assert ran == [1, 1]
    finally:
        task.cancel()
