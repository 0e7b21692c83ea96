"""The CUDA runner: encoder outputs and decoder caches stay in device memory between steps (IO binding).

Only the (R, V) log-probs come back to the host each step; caches are reordered on the device by gather.onnx.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from transduce.engine import io_names as names
from transduce.engine.denormals import open_session
from transduce.engine.errors import ModelLoadError
from transduce.engine.numpy_runner import NumpyRunner
from transduce.engine.runner import CUDA, DecoderState, OrtSessions, empty_state


class IOBindingRunner:
    """Device-resident decoder runner (see ``transduce.engine.runner.DecoderRunner``)."""

    defers_compaction = False

    def __init__(self, sessions: OrtSessions) -> None:
        self.sessions = sessions
        self.device = "cuda" if sessions.provider == CUDA else "cpu"
        path = sessions.manifest.path("gather")
        try:
            self.gather = open_session(str(path), sessions.options, sessions.providers)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ModelLoadError(f"cannot load {path} (needed for device-resident caches): {exc}") from exc
        n = 2 * sessions.manifest.n_layers
        self.gather_inputs = [names.gather_input(i) for i in range(n)]
        self.gather_outputs = [names.gather_output(i) for i in range(n)]

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> DecoderState:
        """Encoder with its cross K/V outputs left on the device."""
        s = self.sessions
        binding = s.encoder.io_binding()
        binding.bind_cpu_input(names.ENC_INPUT_IDS, input_ids)
        binding.bind_cpu_input(names.ENC_ATTENTION_MASK, attention_mask)
        for name in s.cross_names:
            binding.bind_output(name, self.device)
        s.encoder.run_with_iobinding(binding)
        cross = dict(zip(s.cross_names, binding.get_outputs(), strict=True))
        zeros = np.zeros(s.empty_cache_shape(input_ids.shape[0]), s.manifest.cache_dtype)
        empty = ort.OrtValue.ortvalue_from_numpy(zeros, self.device, 0)
        return empty_state(attention_mask, cross, empty, s.past_names)

    def step(self, tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        """One decoder step; the new caches stay bound on the device."""
        s = self.sessions
        binding = s.decoder.io_binding()
        binding.bind_cpu_input(names.DEC_INPUT_IDS, tokens.reshape(-1, 1).astype(np.int64, copy=False))
        binding.bind_cpu_input(names.DEC_ENCODER_MASK, state.encoder_mask)
        positions, mask = state.step_inputs()
        binding.bind_cpu_input(names.DEC_POSITIONS, positions)
        binding.bind_cpu_input(names.DEC_SELF_MASK, mask)
        for name, value in (*state.past.items(), *state.cross.items()):
            binding.bind_ortvalue_input(name, value)
        binding.bind_output(names.DEC_LOG_PROBS, "cpu")
        for name in s.present_names:
            binding.bind_output(name, self.device)
        s.decoder.run_with_iobinding(binding)
        log_probs, *present = binding.get_outputs()
        state.past = dict(zip(s.past_names, present, strict=True))
        state.stepped(mask)
        return np.asarray(log_probs.numpy())

    def _gather(self, tensors: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
        binding = self.gather.io_binding()
        binding.bind_cpu_input(names.GATHER_ROWS, rows.astype(np.int64, copy=False))
        for slot, value in zip(self.gather_inputs, tensors.values(), strict=True):
            binding.bind_ortvalue_input(slot, value)
        for slot in self.gather_outputs:
            binding.bind_output(slot, self.device)
        self.gather.run_with_iobinding(binding)
        return dict(zip(tensors.keys(), binding.get_outputs(), strict=True))

    def reorder(self, state: DecoderState, rows: np.ndarray | None, sentences: np.ndarray | None) -> None:
        """Gather caches on the device; the small per-row and per-sentence arrays on the host."""
        if rows is not None:
            state.past = self._gather(state.past, rows)
        if sentences is not None:
            state.cross = self._gather(state.cross, sentences)
        state.reorder_host(rows, sentences)

    def merge(self, state: DecoderState, other: DecoderState) -> DecoderState:
        """Joins are rare next to steps: the caches make one round trip through host memory."""
        merged = NumpyRunner(self.sessions).merge(self._on_host(state), self._on_host(other))
        return self._on_device(merged)

    def trim(self, state: DecoderState) -> None:
        """Trimming costs a round trip through host memory here, so it waits until 16 positions can go."""
        S = state.encoder_mask.shape[1]
        unused_source = S - state.source_columns_used()
        if state.padding_to_trim() >= 16 or (unused_source >= 16 and unused_source * 4 >= S):  # as NumpyRunner cuts
            host = self._on_host(state)
            NumpyRunner(self.sessions).trim(host)
            trimmed = self._on_device(host)
            state.past, state.self_mask = trimmed.past, trimmed.self_mask
            state.cross, state.encoder_mask = trimmed.cross, trimmed.encoder_mask

    def _on_host(self, state: DecoderState) -> DecoderState:
        def host(tensors: dict[str, Any]) -> dict[str, np.ndarray]:
            return {n: t.numpy() if isinstance(t, ort.OrtValue) else t for n, t in tensors.items()}

        return DecoderState(state.encoder_mask, host(state.cross), host(state.past), state.positions, state.self_mask)

    def _on_device(self, state: DecoderState) -> DecoderState:
        def device(tensors: dict[str, Any]) -> dict[str, Any]:
            return {
                n: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(t), self.device, 0) for n, t in tensors.items()
            }

        return DecoderState(
            state.encoder_mask, device(state.cross), device(state.past), state.positions, state.self_mask
        )
