"""The process's one CPU memory arena, shared by the onnxruntime sessions of its CPU engines."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np
import onnxruntime as ort

log = logging.getLogger("transduce.engine")

USE_ENV_ALLOCATORS = "session.use_env_allocators"  # onnxruntime's session config key: allocate from the shared arena
SHRINK_AFTER_RUN = "memory.enable_memory_arena_shrinkage"  # onnxruntime's run config key: free unused arena regions


class SharedArena:
    """One onnxruntime CPU arena for every session that opts in, instead of an arena per session.

    Each onnxruntime session otherwise grows an arena of its own and keeps it at that session's peak: the encoder's
    holds what a batch's encoder run needed while the decoder's steps grow another beside it, and every model and
    top-k session adds one. On one arena the decoder reuses what the encoder freed. Measured on the shipped model
    (``bench/results/shared-arena/``): peak resident memory 9-10 % lower at batch 32, greedy and beam 4, fp32 and
    int8 (e.g. 261 -> 237 MB), at the same speed; 2 MB lower at batch 1.

    The arena grows by powers of two, as a session's own does (growing by the size asked for fragmented it: peak
    memory 32-140 % above the shared arena's), and keeps what it grew to until it is shrunk, which
    ``transduce.engine.session.release_memory`` does after a model is unloaded and before one is loaded. Registered
    once per process; opt-in (``open_runner(..., shared_arena=True)``, which the service, the command line and the
    benches ask for through ``shared_pool``), CPU sessions only: CUDA engines keep onnxruntime's default host
    allocator, and so do sessions opened for CUDA that fell back to the CPU."""

    def __init__(self, register: Callable[[], None] | None) -> None:
        self._register = register  # None: never registered (the test suite's in-process engines)
        self._lock = threading.Lock()
        self.made = False
        self._tried = False
        self._shrinker: ort.InferenceSession | None = None  # a one-node session on the arena, run to shrink it

    def make(self) -> bool:
        """Register the arena with onnxruntime unless this process did; whether sessions can use it. A failure is
        logged once and sessions keep arenas of their own."""
        with self._lock:
            if not self._tried and self._register is not None:
                self._tried = True
                try:
                    self._register()
                    self.made = True
                except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
                    log.warning("onnxruntime's shared CPU arena could not be made (sessions keep their own): %s", exc)
            return self.made

    def shrink(self, options: Callable[[], ort.SessionOptions]) -> None:
        """Give the system back the arena's regions that no tensor uses (after a model is unloaded: without it
        the memory an unloaded engine freed stays in the arena). onnxruntime shrinks an arena at the end of a run
        asked to, so this runs a one-node graph on it, a session opened once with ``options()``."""
        from transduce.engine.denormals import open_session
        from transduce.engine.ortrun import CPU
        from transduce.engine.topk import topk_graph

        with self._lock:
            if not self.made:
                return
            if self._shrinker is None:
                opts = options()
                self.apply(opts)
                self._shrinker = open_session(topk_graph(), opts, [CPU])
            run_options = ort.RunOptions()
            run_options.add_run_config_entry(SHRINK_AFTER_RUN, "cpu:0")
            feed = {"log_probs": np.zeros((1, 1), np.float32), "k": np.ones(1, np.int64)}
            self._shrinker.run(None, feed, run_options)

    def apply(self, options: ort.SessionOptions) -> None:
        """Have a session opened with ``options`` allocate from this arena, once it is made."""
        if self.made:
            options.add_session_config_entry(USE_ENV_ALLOCATORS, "1")


def _register_cpu_arena() -> None:
    """onnxruntime's environment-wide CPU arena allocator, growing by powers of two (its default strategy)."""
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(info, ort.OrtArenaCfg({"arena_extend_strategy": 0}))  # 0: kNextPowerOfTwo


PROCESS_ARENA = SharedArena(_register_cpu_arena)
