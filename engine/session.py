"""onnxruntime sessions for the two graphs, with the decoder state (caches) kept per batch of rows."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from engine import io_names as names
from engine.errors import ModelLoadError
from engine.manifest import Manifest

log = logging.getLogger("transduce.engine")

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


@dataclass
class DecoderState:
    """Everything the next decoder step reads: per sentence (N rows) and per active hypothesis (R = N * k rows)."""

    encoder_mask: Any  # (N, S) int64
    cross: dict[str, Any]  # cross-attention K/V by input name, each (N, h, S, d_k)
    past: dict[str, Any] = field(default_factory=dict)  # self-attention K/V by input name, each (R, h, P, d_k)


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
        log.info("CUDA libraries not found (%s); using the CPU", missing[0])
        return [CPU]
    if device == "cuda":
        raise ModelLoadError("device='cuda' was requested but this onnxruntime has no CUDA execution provider")
    return [CPU]


def session_options(intra_threads: int, inter_threads: int, *, spin: bool = True) -> ort.SessionOptions:
    """Full graph optimisation, thread pools sized to the cores this process may use.

    ``spin=False`` is for a session that runs once per batch (the encoder): each session has its own pool, and an idle
    pool's threads spin for a while after every run, which steals the cores the decoder steps right after it need
    (measured with ``transduce bench engines``: greedy decoding at batch 1 ran at less than half speed)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = intra_threads if intra_threads > 0 else len(os.sched_getaffinity(0))
    opts.inter_op_num_threads = max(1, inter_threads)
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return opts


class OnnxSeq2Seq:
    """The encoder and one-step decoder sessions; numpy in and out on CPU, device-resident caches on CUDA."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        device: str = "auto",
        intra_threads: int = 0,
        inter_threads: int = 1,
        strict_device: bool = False,
    ) -> None:
        self.manifest = manifest
        providers = choose_providers(device)
        opts = session_options(intra_threads, inter_threads)
        try:
            encoder_opts = session_options(intra_threads, inter_threads, spin=False)
            self.encoder = ort.InferenceSession(str(manifest.path("encoder")), encoder_opts, providers=providers)
            self.decoder = ort.InferenceSession(str(manifest.path("decoder")), opts, providers=providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ModelLoadError(f"cannot load the ONNX graphs in {manifest.model_dir}: {exc}") from exc
        self.provider = self.decoder.get_providers()[0]
        if device == "cuda" and self.provider != CUDA:
            if strict_device:
                raise ModelLoadError("device='cuda' was requested but the CUDA provider failed to initialise")
            log.warning("CUDA was requested but is not usable; falling back to CPU")
        log.info("onnxruntime sessions ready on %s", self.provider)
        L = manifest.n_layers
        self.cross_names = names.cross_names(L)
        self.past_names = names.past_names(L)
        self.present_names = names.present_names(L)
        self.use_io_binding = self.provider == CUDA
        if self.use_io_binding:
            from engine.device import DeviceOps

            self.device_ops: DeviceOps | None = DeviceOps(self, providers, opts)
        else:
            self.device_ops = None

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> DecoderState:
        """Run the encoder once: (B, S) ids and mask -> a decoder state with cross K/V and an empty self cache."""
        if self.device_ops is not None:
            return self.device_ops.encode(input_ids, attention_mask)
        outputs = self.encoder.run(
            self.cross_names, {names.ENC_INPUT_IDS: input_ids, names.ENC_ATTENTION_MASK: attention_mask}
        )
        B = input_ids.shape[0]
        empty = np.zeros((B, self.manifest.n_heads, 0, self.manifest.d_k), dtype=self.manifest.cache_dtype)
        return DecoderState(
            attention_mask, dict(zip(self.cross_names, outputs, strict=True)), dict.fromkeys(self.past_names, empty)
        )

    def step(self, tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        """Feed one token per row (R,) -> log-probs (R, V); the state's self cache grows by one position."""
        if self.device_ops is not None:
            return self.device_ops.step(tokens, state)
        feed = {
            names.DEC_INPUT_IDS: tokens.reshape(-1, 1).astype(np.int64, copy=False),
            names.DEC_ENCODER_MASK: state.encoder_mask,
            **state.past,
            **state.cross,
        }
        log_probs, *present = self.decoder.run([names.DEC_LOG_PROBS, *self.present_names], feed)
        state.past = dict(zip(self.past_names, present, strict=True))
        return np.asarray(log_probs)

    def reorder(self, state: DecoderState, rows: np.ndarray | None, sentences: np.ndarray | None) -> None:
        """Gather every layer's self cache by ``rows`` and the per-sentence tensors by ``sentences`` (None: keep)."""
        if self.device_ops is not None:
            self.device_ops.reorder(state, rows, sentences)
            return
        from engine.cache import reorder

        if rows is not None:
            state.past = reorder(state.past, rows)
        if sentences is not None:
            state.cross = reorder(state.cross, sentences)
            state.encoder_mask = state.encoder_mask[sentences]
