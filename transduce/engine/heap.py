"""glibc malloc settings for the arrays a decoder step allocates and frees (caches, reorders, log-probs)."""

from __future__ import annotations

import ctypes
import logging
import threading

log = logging.getLogger("transduce.engine")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc pairs with a threshold it raises itself

_lock = threading.Lock()
_set: bool | None = None


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
            try:
                libc = ctypes.CDLL("libc.so.6")
                _set = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
                )
            except (OSError, AttributeError):  # not glibc (musl, macOS): its own allocator's defaults
                _set = False
            log.debug("glibc malloc thresholds for step arrays set: %s", _set)
        return _set
