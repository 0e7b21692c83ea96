"""Flush-to-zero and denormals-are-zero for the CPU threads that decode.

A masked logit or attention score (-inf, or onnxruntime's -10000 fill) comes out of the softmax's exp() as a
denormal float, and x86 CPUs take microcode assists on denormals: on an Intel Xeon (Sapphire Rapids class) a
LogSoftmax over 32 rows of 2,300 shortlist candidates, a fifth of them masked, took 290 us instead of 25. With the
MXCSR's FTZ and DAZ bits set, such values are zero, which is what they round to in every sum they enter (the largest
term of a softmax is 1), so translations do not change (README, lever table).

onnxruntime sets the bits on the threads of a session's own pool (``session.set_denormal_as_zero``) but not on the
thread that calls ``run()``, which does part of every operator's work, nor on the process's shared pool (the Python
API has no setting for it). ``flushing_denormals()`` sets them on the calling thread for a block and puts the
thread's previous mode back after it, so code outside the engine keeps IEEE denormals, except callbacks the engine
calls while it decodes (``Translator.translate``'s ``on_result``, the step scheduler's ``on_step``).
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import sys
from collections.abc import Iterator
from typing import Any

import onnxruntime as ort

SESSION_CONFIG_KEY = "session.set_denormal_as_zero"  # onnxruntime: FTZ/DAZ on the threads of a session's own pool
FTZ_DAZ = 0x8040  # MXCSR bits: flush-to-zero (15) and denormals-are-zero (6)


class _FeMode(ctypes.Structure):
    """glibc's x86-64 ``femode_t``: the x87 control word and the SSE control/status register."""

    _fields_ = [("control_word", ctypes.c_ushort), ("reserved", ctypes.c_ushort), ("mxcsr", ctypes.c_uint)]


def _libm() -> Any | None:
    """glibc's libm with fegetmode/fesetmode on x86-64 Linux, else None (other CPUs and C libraries: no-op)."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        libm = ctypes.CDLL("libm.so.6")
    except OSError:
        return None
    return libm if hasattr(libm, "fegetmode") and hasattr(libm, "fesetmode") else None


_LIBM = _libm()


def supported() -> bool:
    """Whether ``flushing_denormals()`` changes anything here (x86-64 Linux with glibc)."""
    return _LIBM is not None


def flags() -> int:
    """This thread's FTZ/DAZ bits (0 where unsupported)."""
    if _LIBM is None:
        return 0
    mode = _FeMode()
    _LIBM.fegetmode(ctypes.byref(mode))
    return int(mode.mxcsr) & FTZ_DAZ


@contextlib.contextmanager
def _keeping_mode(set_bits: int) -> Iterator[None]:
    """The block runs with ``set_bits`` added to this thread's MXCSR; the thread's mode as it was afterwards."""
    if _LIBM is None:
        yield
        return
    before = _FeMode()
    _LIBM.fegetmode(ctypes.byref(before))
    if set_bits:
        _LIBM.fesetmode(ctypes.byref(_FeMode(before.control_word, before.reserved, before.mxcsr | set_bits)))
    try:
        yield
    finally:
        _LIBM.fesetmode(ctypes.byref(before))


def flushing_denormals() -> contextlib.AbstractContextManager[None]:
    """FTZ and DAZ on this thread for the block; the thread's previous mode afterwards (nested blocks are fine)."""
    return _keeping_mode(FTZ_DAZ)


def open_session(model: str | bytes, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    """An onnxruntime session, opened without touching this thread's denormal mode: onnxruntime sets the mode of
    the first session a process opens on the thread that opens it, for good."""
    with _keeping_mode(0):
        return ort.InferenceSession(model, options, providers=providers)
