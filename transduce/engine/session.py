"""Opening a model directory's onnxruntime sessions and choosing the decoder runner for the device they run on."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from transduce.engine import io_names as names
from transduce.engine.arena import PROCESS_ARENA, SharedArena
from transduce.engine.denormals import SESSION_CONFIG_KEY
from transduce.engine.embedding import load_embedding, open_given
from transduce.engine.errors import ModelLoadError
from transduce.engine.heap import give_memory_back, keep_step_arrays_on_heap
from transduce.engine.iobinding_runner import IOBindingRunner
from transduce.engine.manifest import Manifest
from transduce.engine.numpy_runner import NumpyRunner
from transduce.engine.ortrun import CPU
from transduce.engine.runner import CUDA, DecoderRunner, OrtSessions
from transduce.engine.shortlist import Shortlist, ShortlistConfig, load_table
from transduce.engine.topk import SessionTopK

log = logging.getLogger("transduce.engine")
_SAID: set[str] = set()  # what choose_providers already logged


def choose_providers(device: str) -> list[str]:
    """Execution providers for ``device`` (auto | cpu | cuda); CUDA only when onnxruntime really offers it and the
    CUDA libraries it needs load (else the CPU, said once with the library that is missing: onnxruntime itself would
    print a screenful of errors for each session before falling back)."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return [CPU]
    if CUDA in ort.get_available_providers():
        missing = missing_cuda_library()
        if missing is None:
            return [CUDA, CPU]
        if missing not in _SAID:  # once per process, not once per engine replica
            _SAID.add(missing)
            log.log(
                logging.WARNING if device == "cuda" else logging.INFO,
                "CUDA libraries not found (%s); using the CPU",
                missing,
            )
        return [CPU]
    if device == "cuda":
        raise ModelLoadError("device='cuda' was requested but this onnxruntime has no CUDA execution provider")
    return [CPU]


def missing_cuda_library() -> str | None:
    """onnxruntime-gpu's line for the first CUDA or cuDNN library it cannot load ("Failed to load
    libcublasLt.so.13: ..."), or None when they all load."""
    captured = io.StringIO()  # preload_dlls prints to stdout, which belongs to `transduce translate` output
    try:  # onnxruntime-gpu >= 1.19 loads CUDA/cuDNN from the nvidia pip packages when present
        with contextlib.redirect_stdout(captured):
            ort.preload_dlls()
    except Exception as exc:  # noqa: BLE001 - best effort, the session creation is the real test
        log.debug("preload_dlls failed: %s", exc)
    missing = [line for line in captured.getvalue().splitlines() if line.startswith("Failed to load")]
    return missing[0] if missing else None


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may use: its CPU affinity, capped by a CPU quota of its cgroup (a container started with
    ``--cpus 2`` on a 64-core host sees 64 cores in its affinity; sizing thread pools by that oversubscribes it)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota(cgroup)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def auto_replicas() -> int:
    """Engine replicas for ``replicas=0``, on a CPU and on CUDA alike: 2 where 2 or more cores are usable, else 1.
    On a CPU (the 2-core bench
    machine), 2 replicas of 1 thread served 1.17-1.49x the requests/s of 1 of 2 threads at beam 4 from 16 clients
    on and cut the short requests' open-loop p99 to 0.5-0.8x; with 1-4 clients 0.78-1.30x.

    On CUDA the GPU waits on the host: a decoder step's Python and search work runs between its kernels, and one
    engine kept an H200 18-19 % busy. Two replicas overlap that work: on an H200 the service served 1.05-1.91x the
    requests/s of one engine of 16 threads from 16 clients on, beam 4 and greedy, static batching
    (bench/results/cuda-replicas-h200/); 4 replicas mostly served less than 2."""
    return 2 if usable_cores() >= 2 else 1


def auto_intra_threads(on_cuda: bool, replicas: int) -> int:
    """Threads per replica for ``intra_threads=0``. On CUDA, 1 for any number of replicas: the graph runs on the
    GPU, and a wider pool only spins on the host (on an H200 one engine of 16 threads served what one of 1 did, 0.96-
    1.11x, for 132 against 9 ms of CPU per beam-4 request). On a CPU, one replica gets every core (0; its pool may be
    the process's, which other models share), several the cores shared out between them."""
    if on_cuda:
        return 1
    return 0 if replicas <= 1 else max(1, usable_cores() // replicas)


def _cgroup_quota(root: Path) -> float | None:
    """CPUs allowed by cgroup v2 ``cpu.max`` ("200000 100000") or v1 ``cpu.cfs_quota_us`` / ``cfs_period_us``; None
    when unlimited or unreadable."""
    try:
        if (root / "cpu.max").is_file():
            quota, _, period = (root / "cpu.max").read_text().strip().partition(" ")
            return None if quota == "max" else int(quota) / int(period or 100000)
        v1 = root / "cpu"
        if (v1 / "cpu.cfs_quota_us").is_file():
            quota_us = int((v1 / "cpu.cfs_quota_us").read_text())
            return None if quota_us <= 0 else quota_us / int((v1 / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return None


class SharedPool:
    """The process's one intra-op thread pool: once made, every onnxruntime session of the process runs on it.

    Each session otherwise has a pool of its own. The encoder's then spun against the decoder's steps for the cores
    both want, so it had to sleep between runs (slow to wake: 0.95 ms per batch-1 sentence on 2 threads against
    0.65 ms spinning), and each model and replica brought threads of its own. On one shared pool the threads the
    encoder spins are the decoder's: the engine alone decoded 1.10x faster at batch 1, 1.07x greedy and 1.04x at
    beam 4 at batch 32 on 2 threads, with identical outputs (README, lever table).

    onnxruntime makes it once per process and then refuses sessions with pools of their own, so it is opt-in
    (``Translator(..., shared_pool=True)``, which the service, the command line and the benches ask for): the first
    engine that asks sizes it, and every session opened after it runs on it, whatever thread count it asks for. A
    process should open its engines all with it or all without it: an engine without it that is opening its sessions
    while another makes the pool fails to load (the service and the command line always ask for it)."""

    def __init__(self, make: Callable[[int], None] | None) -> None:
        self._make = make  # None: never made (the test suite's in-process engines; onnxruntime cannot undo one)
        self._lock = threading.Lock()
        self.size: int | None = None  # None: not made; 0: onnxruntime refused (made elsewhere in this process)
        self._said: set[int] = set()

    def make(self, threads: int) -> None:
        """Make the pool with ``threads`` threads, unless this process already has one."""
        with self._lock:
            if self.size is None and self._make is not None:
                try:
                    self._make(threads)
                    self.size = threads
                except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
                    if "already been created" not in str(exc):  # no pool: sessions keep pools of their own
                        log.warning("onnxruntime's shared thread pool could not be made: %s", exc)
                        return
                    log.warning("onnxruntime's shared thread pool was made outside transduce: %s", exc)
                    self.size = 0

    def runs(self, threads: int) -> bool:
        """Whether a session asking for ``threads`` threads runs on the shared pool (once made, every one does)."""
        with self._lock:
            if self.size is None:
                return False
            if self.size and threads != self.size and threads not in self._said:
                self._said.add(threads)
                log.info(
                    "an engine asked for %d threads: it runs on the process's shared pool of %d", threads, self.size
                )
            return True


def _make_global_pool(threads: int) -> None:
    """onnxruntime's global intra-op pool of ``threads`` (and a one-thread inter-op pool: runs are sequential)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as capi

    capi.set_global_thread_pool_sizes(threads, 1)


PROCESS_POOL = SharedPool(_make_global_pool)


def session_options(
    intra_threads: int,
    inter_threads: int,
    *,
    spin: bool = True,
    pool: SharedPool | None = None,
    arena: SharedArena | None = None,
) -> ort.SessionOptions:
    """Full graph optimisation, on the process's shared thread pool once it is made (``SharedPool``), else on a pool
    of the session's own sized to the cores this process may use (``pool``: another pool than the process's).

    ``spin=False`` is for a session with a pool of its own that runs once per batch (the encoder): an idle pool's
    threads spin for a while after every run, which steals the cores the decoder steps right after it need
    (measured with ``transduce bench engines``: greedy decoding at batch 1 ran at less than half speed). The shared
    pool always spins: its threads are the decoder's.

    ``arena``: allocate from that shared CPU arena once it is made (``transduce.engine.arena``), else from the
    session's own."""
    opts = ort.SessionOptions()
    if arena is not None:
        arena.apply(opts)
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    # flush denormals on the threads of the session's own pool (``transduce.engine.denormals``; the calling thread
    # flushes them while it decodes)
    opts.add_session_config_entry(SESSION_CONFIG_KEY, "1")
    threads = intra_threads if intra_threads > 0 else usable_cores()
    if (pool or PROCESS_POOL).runs(threads):
        opts.use_per_session_threads = False  # thread counts left unset: onnxruntime warns that they are ignored
        return opts
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = max(1, inter_threads)
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return opts


def model_providers(manifest: Manifest, device: str) -> list[str]:
    """The providers ``manifest``'s model runs on for ``device``: ``choose_providers``, except that an int8 export
    runs on the CPU unless ``device`` is "cuda" (its decoders are the CPU graphs; int8 MatMuls have no CUDA kernels
    in onnxruntime)."""
    providers = choose_providers(device)
    if manifest.dtype == "int8-dynamic" and device == "auto" and providers != [CPU]:
        if manifest.model_name not in _SAID:
            _SAID.add(manifest.model_name)
            log.info("%s is an int8 export, made for CPUs: serving it on the CPU", manifest.model_name)
        providers = [CPU]
    return providers


def open_runner(
    manifest: Manifest,
    *,
    device: str = "auto",
    intra_threads: int = 0,
    inter_threads: int = 1,
    strict_device: bool = False,
    shortlist: bool = True,
    shortlist_config: ShortlistConfig | None = None,
    loaded: OrtSessions | None = None,
    shared_pool: bool = False,
    shared_arena: bool = False,
) -> DecoderRunner:
    """Open the encoder and decoder sessions on ``device``; an IO-binding runner on CUDA, a numpy runner on CPU.

    On the CPU the decoder is the export's CPU decoder (fused self-attention) when it has one. An int8 export runs on
    the CPU unless ``device`` is "cuda".

    ``shortlist``: on the CPU, a model exported with a vocabulary shortlist decodes with its shortlist graph
    (``transduce.engine.shortlist``); False, or on CUDA, the full-vocabulary decoder. ``loaded``: another runner's
    sessions of the same model, whose shortlist and mapped embedding table (``transduce.engine.embedding``) this one
    shares instead of a copy of each (replicas). ``shared_pool``:
    make the process's shared thread pool (``SharedPool``) of ``intra_threads`` if it is not made yet.
    ``shared_arena``: CPU sessions allocate from the process's one CPU arena (``transduce.engine.arena``), made if
    it is not yet; CUDA sessions never do."""
    providers = model_providers(manifest, device)
    keep_step_arrays_on_heap()
    if shared_pool:
        PROCESS_POOL.make(intra_threads if intra_threads > 0 else usable_cores())
    arena = PROCESS_ARENA if shared_arena and CUDA not in providers and PROCESS_ARENA.make() else None
    options = session_options(intra_threads, inter_threads, arena=arena)
    use_shortlist = shortlist and manifest.has_shortlist and CUDA not in providers
    embedding = None if CUDA in providers else (loaded and loaded.embedding) or load_embedding(manifest)
    try:
        encoder_options = session_options(intra_threads, inter_threads, spin=False, arena=arena)
        encoder = open_given(manifest.path("encoder"), encoder_options, providers, embedding)
        cpu_decoder = "cpu_decoder" if "cpu_decoder" in manifest.raw and CUDA not in providers else "decoder"
        graph = manifest.path("shortlist_decoder" if use_shortlist else cpu_decoder)
        decoder_options = session_options(intra_threads, inter_threads, arena=arena)  # its own: open_given adds to it
        decoder = open_given(graph, decoder_options, providers, embedding)
        # the search's top-k on the CPU, on the shared pool (asking for its size: no "asked for" line in the log) or
        # else on the calling thread alone (a pool of its own would sleep between runs and be slow to wake)
        select_top_k = SessionTopK(session_options(PROCESS_POOL.size or 1, 1, spin=False, arena=arena))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise ModelLoadError(f"cannot load the ONNX graphs in {manifest.model_dir}: {exc}") from exc
    sessions = OrtSessions(manifest, encoder, decoder, providers, options, top_k=select_top_k, embedding=embedding)
    if use_shortlist:
        inputs = {i.name for i in decoder.get_inputs()}
        quantized = names.DEC_VOCAB_PROJECTION_INT8 in inputs
        if loaded is not None and loaded.shortlist is not None and loaded.shortlist.quantized == quantized:
            sessions.shortlist = loaded.shortlist
        else:  # float32 rows: the mapped table, when the export has one, instead of a copy read from the table file
            rows = embedding.table if embedding is not None and not quantized else None
            sessions.shortlist = load_shortlist(manifest, shortlist_config, quantized=quantized, rows=rows)
        sessions.shortlist_masks = names.DEC_VOCAB_MASK in inputs
    if device == "cuda" and sessions.provider != CUDA:
        if strict_device:
            missing = missing_cuda_library() if CUDA in ort.get_available_providers() else None
            raise ModelLoadError(
                "device='cuda' was requested but the CUDA provider failed to initialise"
                + (f" ({missing})" if missing else "")
            )
        if CUDA in providers:  # (without its libraries choose_providers said so already)
            log.warning("CUDA was requested but is not usable; falling back to CPU")
    log.info("onnxruntime sessions ready on %s", sessions.provider)
    return IOBindingRunner(sessions) if sessions.provider == CUDA else NumpyRunner(sessions)


def release_memory() -> None:
    """Hand the system back what unloaded engines freed: the shared arena's unused regions (``SharedArena.shrink``),
    then glibc's freed memory (``give_memory_back``)."""
    try:  # (asking for the shared pool's size: no "an engine asked for" line in the log)
        PROCESS_ARENA.shrink(lambda: session_options(PROCESS_POOL.size or 1, 1, spin=False))
    except Exception as exc:  # noqa: BLE001 - a clean-up: a model load or unload must not fail on it
        log.warning("onnxruntime's shared CPU arena could not be shrunk: %s", exc)
    give_memory_back()


def load_shortlist(
    manifest: Manifest,
    config: ShortlistConfig | None = None,
    *,
    quantized: bool = False,
    rows: np.ndarray | None = None,
) -> Shortlist:
    """The shortlist of an export (its table and projection rows); eos is always a candidate, the unknown piece only
    for a source that has one. ``quantized``: rows for a shortlist decoder whose projection is int8. ``rows``: the
    projection rows to use (the export's mapped embedding table), not read from the table file."""
    path = manifest.path("shortlist")
    try:
        table, projection = load_table(path, projection=rows is None)
        projection = projection if rows is None else rows
    except ValueError as exc:
        raise ModelLoadError(f"{exc}: re-export the model") from exc
    if projection is None or table.vocab_size != manifest.vocab_size:
        raise ModelLoadError(f"{path} does not fit the model ({manifest.vocab_size} pieces): re-export the model")
    unk = int(manifest.raw.get("special_ids", {}).get("unk", manifest.eos_id))
    shortlist = Shortlist(table, projection, always=[manifest.eos_id], unk=unk, config=config, quantized=quantized)
    if quantized:  # the file's float32 rows back to the system, not kept on glibc's heap
        del projection
        give_memory_back()
    return shortlist
