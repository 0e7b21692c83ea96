"""Ctrl-C during a training run: the step in progress ends and is saved before the run stops."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run, after the step in progress was finished and saved (the message says where)."""


@contextlib.contextmanager
def deferred_interrupt(enabled: bool) -> Iterator[Callable[[], bool]]:
    """While training: SIGINT only sets a flag the loop reads after each step (so a step is never cut in half and
    its checkpoint can be saved); a second SIGINT interrupts at once. Off for several processes and outside the
    main thread (where signals cannot be handled)."""
    if (
        not enabled
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # (started in the background by a script: ignored)
    ):
        yield lambda: False
        return
    hits: list[int] = []

    def on_interrupt(signum: int, frame: object) -> None:
        if hits:
            raise KeyboardInterrupt
        hits.append(signum)
        print("transduce train: finishing the step to save it (Ctrl-C again stops at once)", file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield lambda: bool(hits)
    finally:
        signal.signal(signal.SIGINT, previous)
