"""IO-binding path: encoder outputs and decoder caches stay in device memory between steps (used on CUDA)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

from engine import io_names as names
from engine.errors import ModelLoadError

if TYPE_CHECKING:
    from engine.session import DecoderState, OnnxSeq2Seq

GATHER_FILE = "gather.onnx"  # rows (R',) int64 + 2L tensors -> the tensors gathered along axis 0


class DeviceOps:
    """Encoder, decoder step and cache reorder with OrtValues bound on the sessions' device."""

    def __init__(self, seq2seq: OnnxSeq2Seq, providers: list[str], opts: ort.SessionOptions) -> None:
        self.s = seq2seq
        self.device = "cuda" if seq2seq.provider == "CUDAExecutionProvider" else "cpu"
        path = seq2seq.manifest.model_dir / GATHER_FILE
        try:
            self.gather = ort.InferenceSession(str(path), opts, providers=providers)
        except Exception as exc:  # noqa: BLE001
            raise ModelLoadError(f"cannot load {path} (needed for device-resident caches): {exc}") from exc
        L = seq2seq.manifest.n_layers
        self.gather_inputs = [f"t.{i}" for i in range(2 * L)]
        self.gather_outputs = [f"g.{i}" for i in range(2 * L)]

    def _empty(self, rows: int) -> Any:
        m = self.s.manifest
        return ort.OrtValue.ortvalue_from_numpy(np.zeros((rows, m.n_heads, 0, m.d_k), m.cache_dtype), self.device, 0)

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> DecoderState:
        """Encoder with its cross K/V outputs left on the device."""
        from engine.session import DecoderState

        binding = self.s.encoder.io_binding()
        binding.bind_cpu_input(names.ENC_INPUT_IDS, input_ids)
        binding.bind_cpu_input(names.ENC_ATTENTION_MASK, attention_mask)
        for name in self.s.cross_names:
            binding.bind_output(name, self.device)
        self.s.encoder.run_with_iobinding(binding)
        cross = dict(zip(self.s.cross_names, binding.get_outputs(), strict=True))
        empty = self._empty(input_ids.shape[0])
        return DecoderState(attention_mask, cross, dict.fromkeys(self.s.past_names, empty))

    def step(self, tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        """One decoder step; only the (R, V) log-probs come back to host memory."""
        binding = self.s.decoder.io_binding()
        binding.bind_cpu_input(names.DEC_INPUT_IDS, tokens.reshape(-1, 1).astype(np.int64, copy=False))
        binding.bind_cpu_input(names.DEC_ENCODER_MASK, state.encoder_mask)
        for name, value in (*state.past.items(), *state.cross.items()):
            binding.bind_ortvalue_input(name, value)
        binding.bind_output(names.DEC_LOG_PROBS, "cpu")
        for name in self.s.present_names:
            binding.bind_output(name, self.device)
        self.s.decoder.run_with_iobinding(binding)
        log_probs, *present = binding.get_outputs()
        state.past = dict(zip(self.s.past_names, present, strict=True))
        return np.asarray(log_probs.numpy())

    def _gather(self, tensors: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
        binding = self.gather.io_binding()
        binding.bind_cpu_input("rows", rows.astype(np.int64, copy=False))
        for slot, value in zip(self.gather_inputs, tensors.values(), strict=True):
            binding.bind_ortvalue_input(slot, value)
        for slot in self.gather_outputs:
            binding.bind_output(slot, self.device)
        self.gather.run_with_iobinding(binding)
        return dict(zip(tensors.keys(), binding.get_outputs(), strict=True))

    def reorder(self, state: DecoderState, rows: np.ndarray | None, sentences: np.ndarray | None) -> None:
        """Gather caches on the device (None: keep); the small int64 source mask is gathered on the host."""
        if rows is not None:
            state.past = self._gather(state.past, rows)
        if sentences is not None:
            state.cross = self._gather(state.cross, sentences)
            state.encoder_mask = state.encoder_mask[sentences]
