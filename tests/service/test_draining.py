"""Draining: accepted requests keep their later stages (a file's next chunk) while the grace runs; what is left at
its end is answered 503; a drain that starts before start-up ends leaves no queue running."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.service.harness import FakeTranslator, build_app, serve
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
