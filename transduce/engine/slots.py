"""What the step scheduler's queue holds: a request, the slot each of its sentences' results goes to, and the
timed result delivered on the request's event loop (``transduce.engine.scheduler``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from transduce.engine.results import TranslationResult
from transduce.engine.running import Job


@dataclass(frozen=True)
class Timed:
    """A sentence's result, when it started decoding and when it finished (monotonic seconds); with the step
    scheduler also how many decoder steps ran while it was queued (counted when it entered the queue, under the
    queue's lock, so time the caller spent before that, tokenising or waiting for the interpreter, is not counted)."""

    result: TranslationResult
    started: float
    finished: float
    steps_queued: int = 0


@dataclass(frozen=True)
class StepStats:
    """One step of the running batches, reported to the ``on_step`` hook."""

    active: int  # sentences that decoded in this step
    finished: int  # of them, how many finished
    queue_wait_ms: list[float]  # how long each sentence admitted before this step waited in the queue
    step_ms: float
    ok: bool
    worker: int = 0  # which worker (engine replica) stepped


@dataclass(eq=False)
class Slot:
    """Where a job's result goes: its request and position, and when it was queued and admitted."""

    request: Request
    index: int
    queued: float
    blocked_since: int | None = None  # step count when it first fitted its request's share but not the batch
    admitted: float = 0.0
    queued_step: int = 0  # step counts when it entered the queue and when it was admitted
    admitted_step: int = 0


@dataclass(eq=False)
class Request:
    """One submit: its queued jobs, results so far, and the future its caller awaits on the event loop."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[Timed]]
    size: int
    deadline: float | None
    submitted: float
    pending: deque[Job] = field(default_factory=deque)
    results: list[Timed | None] = field(init=False)
    remaining: int = field(init=False)
    cancelled: bool = False  # set on the event loop (client gone, deadline); read by the worker between steps

    def __post_init__(self) -> None:
        self.results, self.remaining = [None] * self.size, self.size

    def over(self) -> bool:
        """Cancelled, failed, or past its deadline: its sentences should not (go on) decode."""
        return self.cancelled or (self.deadline is not None and time.monotonic() > self.deadline)

    def deliver(self, index: int, timed: Timed) -> None:
        """On the event loop: store one result; the last one completes the future."""
        if self.future.done():
            return
        self.results[index] = timed
        self.remaining -= 1
        if self.remaining == 0:
            missing = [i for i, r in enumerate(self.results) if r is None]
            if missing:  # a sentence delivered twice: a scheduler bug, never a shifted result list
                self.future.set_exception(RuntimeError(f"no translation was delivered for sentences {missing[:10]}"))
            else:
                self.future.set_result(cast(list[Timed], self.results))

    def fail(self, exc: BaseException) -> None:
        """On the event loop: fail the request unless it is already over."""
        if not self.future.done():
            self.future.set_exception(exc)


def call_soon(request: Request, fn: Callable[..., None], *args: object) -> None:
    """Run ``fn`` on the request's event loop (ignored when that loop is gone)."""
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for this request any more
        request.loop.call_soon_threadsafe(fn, *args)
