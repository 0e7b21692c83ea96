"""glibc's allocator: settings for the arrays a decoder step allocates and frees (caches, reorders, log-probs), and
handing freed memory back to the system when a model is unloaded."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import threading
from typing import Any

log = logging.getLogger("transduce.engine")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc pairs with a threshold it raises itself

_lock = threading.Lock()
_set: bool | None = None


def _glibc() -> Any | None:
    """glibc (``libc.so.6``: mallopt, malloc_trim), or None where the C library is another (musl, macOS)."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def give_memory_back() -> None:
    """Collect garbage and ask glibc to return freed memory to the system (nothing elsewhere)."""
    gc.collect()
    with contextlib.suppress(AttributeError):
        if (libc := _glibc()) is not None:
            libc.malloc_trim(0)


def keep_step_arrays_on_heap() -> bool:
    """Have glibc serve allocations up to 32 MiB from its heap and keep up to 64 MiB freed there (once per process);
    False where that is not glibc.

    glibc maps each allocation above its mmap threshold (128 KiB until it adapts) afresh and unmaps it when freed, so
    a decoder step's cache arrays (megabytes each at batch 32) were new zero pages every step, faulted in again. glibc
    raises the threshold by itself after a large mapped block is freed, which loading graphs with their weights inside
    used to do by accident; with the weights mapped from their own files (export revision 6) nothing did, and beam 4
    at batch 32 ran at 0.82-0.84x in a fresh process, back to 1.00x with these settings (README, lever table)."""
    global _set
    with _lock:
        if _set is None:
            libc = _glibc()  # None: not glibc, whose allocator keeps its own defaults
            try:
                _set = (
                    libc is not None
                    and bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
                    and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
                )
            except AttributeError:  # a libc.so.6 without mallopt
                _set = False
            log.debug("glibc malloc thresholds for step arrays set: %s", _set)
        return _set
