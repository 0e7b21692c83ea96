"""Memory handed back to the system once the server has been idle for ``idle_release_s`` seconds."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from transduce.engine.session import release_memory
from transduce.service.model_entry import MB, resident_bytes
from transduce.service.state import AppState

log = logging.getLogger("transduce.service")
MAX_TICK_S = 5.0  # how often the idle check looks at most: a release comes at most this late


async def release_when_idle(state: AppState, release: Callable[[], None] | None = None) -> None:
    """Forever (a lifespan task): once no translate, file or detect request has been in work and no model has been
    loading for ``idle_release_s`` seconds, hand back to the system what the engines freed since the last time
    (``transduce.engine.session.release_memory``: the shared onnxruntime arena's unused regions, then glibc's free
    memory), once per idle spell, the first after start-up included.

    Without it the process keeps its peak: a server on 2 cores ready at 140 MB stayed at 285-290 MB after a burst
    at beam 4, 181-224 MB once released (``bench/results/shared-arena/``); the first batch after a release faults
    its pages in again. A release runs beside whatever starts meanwhile (it frees only what no tensor uses); one
    that fails is logged, and the next spell tries again."""
    period = state.settings.idle_release_s
    tick = min(max(period / 4, 0.05), MAX_TICK_S)
    released: float | None = None  # when the work before the last release ended: none yet
    began = time.monotonic()  # no work yet: idle since start-up (not since the clock's zero, as it once said)
    while True:
        await asyncio.sleep(tick)
        pool = state.pool
        if state.translating or state.file_jobs or (pool is not None and pool.loading):
            continue
        ended = max(state.last_translation, pool.last_load_end if pool is not None else 0.0)  # the last work's end
        idle_s = time.monotonic() - max(ended, began)
        if ended == released or idle_s < period:
            continue
        released = ended
        try:
            before = resident_bytes()
            await asyncio.to_thread(release or release_memory)
            after = resident_bytes()
        except Exception:  # a bug: the feature must not end silently with it
            log.exception("the idle release failed")
            continue
        log.info("idle for %.1f s: memory handed back, resident %.1f -> %.1f MB", idle_s, before / MB, after / MB)
