"""Opening a model directory's onnxruntime sessions and choosing the decoder runner for the device they run on."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
from pathlib import Path

import onnxruntime as ort

from transduce.engine import io_names as names
from transduce.engine.errors import ModelLoadError
from transduce.engine.iobinding_runner import IOBindingRunner
from transduce.engine.manifest import Manifest
from transduce.engine.numpy_runner import NumpyRunner
from transduce.engine.runner import CPU, CUDA, DecoderRunner, OrtSessions
from transduce.engine.shortlist import Shortlist, ShortlistConfig, load_table

log = logging.getLogger("transduce.engine")
_SAID: set[str] = set()  # what choose_providers already logged


def choose_providers(device: str) -> list[str]:
    """Execution providers for ``device`` (auto | cpu | cuda); CUDA only when onnxruntime really offers it."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cpu":
        return [CPU]
    if CUDA in ort.get_available_providers():
        captured = io.StringIO()  # preload_dlls prints to stdout, which belongs to `transduce translate` output
        try:  # onnxruntime-gpu >= 1.19 loads CUDA/cuDNN from the nvidia pip packages when present
            with contextlib.redirect_stdout(captured):
                ort.preload_dlls()
        except Exception as exc:  # noqa: BLE001 - best effort, the session creation below is the real test
            log.debug("preload_dlls failed: %s", exc)
        missing = [line for line in captured.getvalue().splitlines() if line.startswith("Failed to load")]
        if not missing or device == "cuda":
            return [CUDA, CPU]
        if missing[0] not in _SAID:  # once per process, not once per engine replica
            _SAID.add(missing[0])
            log.info("CUDA libraries not found (%s); using the CPU", missing[0])
        return [CPU]
    if device == "cuda":
        raise ModelLoadError("device='cuda' was requested but this onnxruntime has no CUDA execution provider")
    return [CPU]


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may use: its CPU affinity, capped by a CPU quota of its cgroup (a container started with
    ``--cpus 2`` on a 64-core host sees 64 cores in its affinity; sizing thread pools by that oversubscribes it)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota(cgroup)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


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


def session_options(intra_threads: int, inter_threads: int, *, spin: bool = True) -> ort.SessionOptions:
    """Full graph optimisation, thread pools sized to the cores this process may use.

    ``spin=False`` is for a session that runs once per batch (the encoder): each session has its own pool, and an idle
    pool's threads spin for a while after every run, which steals the cores the decoder steps right after it need
    (measured with ``transduce bench engines``: greedy decoding at batch 1 ran at less than half speed)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = intra_threads if intra_threads > 0 else usable_cores()
    opts.inter_op_num_threads = max(1, inter_threads)
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return opts


def open_runner(
    manifest: Manifest,
    *,
    device: str = "auto",
    intra_threads: int = 0,
    inter_threads: int = 1,
    strict_device: bool = False,
    shortlist: bool = True,
    shortlist_config: ShortlistConfig | None = None,
    loaded_shortlist: Shortlist | None = None,
) -> DecoderRunner:
    """Open the encoder and decoder sessions on ``device``; an IO-binding runner on CUDA, a numpy runner on CPU.

    On the CPU the decoder is the export's CPU decoder (fused self-attention) when it has one. An int8 export runs on
    the CPU unless ``device`` is "cuda".

    ``shortlist``: on the CPU, a model exported with a vocabulary shortlist decodes with its shortlist graph
    (``transduce.engine.shortlist``); False, or on CUDA, the full-vocabulary decoder. ``loaded_shortlist``: that
    model's shortlist, already loaded by another runner (replicas share one instead of a copy each)."""
    providers = choose_providers(device)
    if manifest.dtype == "int8-dynamic" and device == "auto" and providers != [CPU]:
        log.info("%s is an int8 export, made for CPUs: serving it on the CPU", manifest.model_name)
        providers = [CPU]  # its decoders are the CPU graphs; int8 MatMuls have no CUDA kernels in onnxruntime
    options = session_options(intra_threads, inter_threads)
    use_shortlist = shortlist and manifest.has_shortlist and CUDA not in providers
    try:
        encoder_options = session_options(intra_threads, inter_threads, spin=False)
        encoder = ort.InferenceSession(str(manifest.path("encoder")), encoder_options, providers=providers)
        cpu_decoder = "cpu_decoder" if "cpu_decoder" in manifest.raw and CUDA not in providers else "decoder"
        graph = manifest.path("shortlist_decoder" if use_shortlist else cpu_decoder)
        decoder = ort.InferenceSession(str(graph), options, providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise ModelLoadError(f"cannot load the ONNX graphs in {manifest.model_dir}: {exc}") from exc
    sessions = OrtSessions(manifest, encoder, decoder, providers, options)
    if use_shortlist:
        sessions.shortlist = loaded_shortlist or load_shortlist(manifest, shortlist_config)
        sessions.shortlist_masks = names.DEC_VOCAB_MASK in {i.name for i in decoder.get_inputs()}
    if device == "cuda" and sessions.provider != CUDA:
        if strict_device:
            raise ModelLoadError("device='cuda' was requested but the CUDA provider failed to initialise")
        log.warning("CUDA was requested but is not usable; falling back to CPU")
    log.info("onnxruntime sessions ready on %s", sessions.provider)
    return IOBindingRunner(sessions) if sessions.provider == CUDA else NumpyRunner(sessions)


def load_shortlist(manifest: Manifest, config: ShortlistConfig | None = None) -> Shortlist:
    """The shortlist of an export (its table and projection rows); eos is always a candidate, the unknown piece only
    for a source that has one."""
    path = manifest.path("shortlist")
    try:
        table, projection = load_table(path)
    except ValueError as exc:
        raise ModelLoadError(f"{exc}: re-export the model") from exc
    if projection is None or table.vocab_size != manifest.vocab_size:
        raise ModelLoadError(f"{path} does not fit the model ({manifest.vocab_size} pieces): re-export the model")
    unk = int(manifest.raw.get("special_ids", {}).get("unk", manifest.eos_id))
    return Shortlist(table, projection, always=[manifest.eos_id], unk=unk, config=config)
