"""Draining: accepted requests keep their later stages (a file's next chunk) while the grace runs; what is left at
its end is answered 503; a drain that starts before start-up ends leaves no queue running."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.service.harness import FakeTranslator, build_app, build_models_app, serve
from transduce.service.draining import drain, stop

pytestmark = pytest.mark.anyio


class Slow(FakeTranslator):
    def translate(self, texts: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return super().translate(texts, **kwargs)


def a_file(lines: int) -> dict[str, Any]:
    text = "\n".join(f"Line number {i}." for i in range(lines)).encode()
    return {"files": {"file": ("a.txt", text)}, "data": {"source": "en", "target": "de"}}


async def test_a_file_accepted_before_the_drain_gets_all_its_chunks() -> None:
    """Its chunks are submitted one after another: closing the queue at SIGTERM refused the next one (503 after
    0.2 s of a 30 s grace)."""
    async with serve(Slow(), max_items=1, shutdown_grace_s=30) as (client, app):
        task = asyncio.create_task(client.post("/translate_file", **a_file(4)))
        await asyncio.sleep(0.3)  # its first chunk is decoding
        drain(app.state.transduce)
        response = await task
        assert response.status_code == 200, response.text
        assert (await client.get("/health/ready")).status_code == 503


async def test_what_the_grace_cuts_off_is_answered_503() -> None:
    async with serve(Slow(), max_items=1, shutdown_grace_s=0.3) as (client, app):
        task = asyncio.create_task(client.post("/translate_file", **a_file(20)))  # 4 s of work
        await asyncio.sleep(0.1)
        drain(app.state.transduce)
        started = time.monotonic()
        response = await task
        assert response.status_code == 503 and response.json() == {"error": "server is shutting down"}
        assert time.monotonic() - started < 2


async def test_a_drain_before_start_up_ends_still_stops_the_queue() -> None:
    app = build_app(FakeTranslator(), shutdown_grace_s=0)
    state = app.state.transduce
    async with app.router.lifespan_context(app):
        assert state.ready
        queue = state.pipeline.queue
    assert queue.closed
    app = build_app(FakeTranslator(), shutdown_grace_s=0)
    state = app.state.transduce
    drain(state)  # as at a SIGTERM while the model loads
    await asyncio.sleep(0.01)  # the grace (0 s) ends before there is a queue
    async with app.router.lifespan_context(app):
        assert not state.ready  # never ready while draining
        queue = state.pipeline.queue
    assert queue.closed
    await stop(state)  # twice: nothing more to do


async def test_a_request_that_reaches_the_app_during_the_grace_is_served() -> None:
    """A body still arriving when SIGTERM came (the draining flag refused it at once, 503 after 0.4 s of 30 s)."""
    async with serve(FakeTranslator(), shutdown_grace_s=0.5) as (client, app):
        drain(app.state.transduce)
        during = await client.post("/translate", json={"q": "Hello world.", "source": "en", "target": "de"})
        assert (await client.get("/health/ready")).status_code == 503  # readiness says it is going
        await asyncio.sleep(0.6)
        after = await client.post("/translate", json={"q": "Hello world.", "source": "en", "target": "de"})
    assert during.status_code == 200, during.text
    assert after.status_code == 503 and after.json() == {"error": "server is shutting down"}


async def test_a_drain_before_several_models_start_lets_them_start(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The pool's queues were stopped before its first model loaded: start-up failed with BatcherClosedError."""
    for name in ("a", "b"):
        shutil.copytree(tiny_model_dir, tmp_path / "models" / name)
    app = build_models_app(tmp_path / "models", shutdown_grace_s=0)
    state = app.state.transduce
    drain(state)
    await asyncio.sleep(0.01)
    async with app.router.lifespan_context(app):
        assert state.started and not state.ready
    await stop(state)


def test_sighup_is_ignored_while_serve_starts() -> None:
    """Before the app handles SIGHUP (a model loading), its default action stopped the server."""
    import signal

    from transduce.serve_cli import _hangups_ignored

    before = signal.getsignal(signal.SIGHUP)
    with _hangups_ignored():
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGHUP) == before
