"""Draining on shutdown: readiness answers 503, accepted requests finish within ``shutdown_grace_s``, what is left
then is answered 503.

``transduce serve`` calls ``drain`` as uvicorn's shutdown begins (SIGTERM): uvicorn stops accepting connections and
waits for the open ones a few seconds longer than the grace, so the 503s of what the grace cut off are written rather
than cut off by uvicorn's own cancellation as 500s. The queues stay open while the grace runs, so a request already
accepted still gets its later stages (a file's next chunk, a pivot's second model, a retry without placeholders).
The lifespan's end calls ``stop`` (without SIGTERM, as under a test client, it drains first)."""

from __future__ import annotations

import asyncio
import logging
import time

from transduce.service.pipeline import TranslationPipeline
from transduce.service.state import AppState

log = logging.getLogger("transduce.service")


def drain(state: AppState) -> None:
    """Start draining (once): readiness 503 from now, the queues stopped when the grace has passed."""
    if state.draining:
        return
    state.ready, state.draining = False, True
    state.drain_started = time.monotonic()
    if state.pool is not None and state.started:  # no model starts loading now: it would outlive the grace
        state.pool.closing = True
    grace = state.settings.shutdown_grace_s
    log.info("draining: finishing accepted requests (up to %g s)", grace)
    state.cut_off = asyncio.get_running_loop().call_later(grace, _cut_off, state, grace)


def _cut_off(state: AppState, grace: float) -> None:
    """The grace is over: what is still queued or decoding is answered 503."""
    log.warning("shutdown grace of %g s is over: requests not finished are answered 503", grace)
    _stop_queues(state, 0.0)


async def stop(state: AppState) -> None:
    """The lifespan's end: drain (if nothing did), then stop the queues within what is left of the grace."""
    drain(state)
    if state.cut_off is not None:
        state.cut_off.cancel()
    left = max(0.0, state.settings.shutdown_grace_s - (time.monotonic() - state.drain_started))
    stopping = _stop_queues(state, left)
    if stopping is not None:
        await stopping


def _stop_queues(state: AppState, timeout: float) -> asyncio.Future[None] | None:
    """Stop every queue (once): what is not finished within ``timeout`` is answered 503. None before the start-up has
    ended: nothing to stop yet (the lifespan's end stops what the start-up made)."""
    if state.stop_task is None and state.started:
        if state.pool is not None:
            state.stop_task = asyncio.ensure_future(state.pool.stop(timeout))
        elif isinstance(state.pipeline, TranslationPipeline):
            state.stop_task = asyncio.ensure_future(state.pipeline.queue.stop(drain=True, timeout=timeout))
    return state.stop_task
