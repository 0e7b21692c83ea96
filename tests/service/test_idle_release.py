"""Memory handed back once the server is idle (``idle_release_s``): once per idle spell, never while a request is
in work, never with 0."""

from __future__ import annotations

import asyncio
import time

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
    async with serve(gate=gate, idle_release_s=PERIOD_S) as (client, _):
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 1  # once after start-up (what loading left), then nothing to hand back
        gate.hold()
        held = asyncio.create_task(client.post("/translate", json={"q": "Hello world.", **EN_DE}))
        await gate.wait_entered()
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 1  # a request in work for longer than the idle period: no release
        gate.release()
        assert (await held).status_code == 200
        ended = time.monotonic()
        await asyncio.sleep(PERIOD_S * 3)
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
        await asyncio.sleep(PERIOD_S * 3)
        assert len(releases) == 3


async def test_zero_never_releases(releases: list[float]) -> None:
    async with serve(idle_release_s=0) as (client, _):
        assert (await client.post("/translate", json={"q": "Hello world.", **EN_DE})).status_code == 200
        await asyncio.sleep(0.5)
    assert releases == []


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_a_bad_idle_period_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="idle_release_s"):
        Settings(idle_release_s=bad)
