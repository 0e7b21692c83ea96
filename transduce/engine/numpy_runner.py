"""The CPU runner: encoder outputs and caches are numpy arrays that go in and out of every session run."""

from __future__ import annotations

import numpy as np

from transduce.engine import io_names as names
from transduce.engine.cache import reorder
from transduce.engine.runner import DecoderState, OrtSessions, empty_state, merged_host


def pad_axis2(tensor: np.ndarray, before: int, after: int) -> np.ndarray:
    """Zeros added before/after axis 2 (the sequence axis of a (rows, heads, length, d_k) cache)."""
    if before == after == 0:
        return tensor
    return np.pad(tensor, ((0, 0), (0, 0), (before, after), (0, 0)))


class NumpyRunner:
    """Host-memory decoder runner (see ``transduce.engine.runner.DecoderRunner``)."""

    def __init__(self, sessions: OrtSessions) -> None:
        self.sessions = sessions

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> DecoderState:
        """Cross K/V of every layer from one encoder run, and an empty self cache per row."""
        s = self.sessions
        feed = {names.ENC_INPUT_IDS: input_ids, names.ENC_ATTENTION_MASK: attention_mask}
        cross = dict(zip(s.cross_names, s.encoder.run(s.cross_names, feed), strict=True))
        empty = np.zeros(s.empty_cache_shape(input_ids.shape[0]), dtype=s.manifest.cache_dtype)
        return empty_state(attention_mask, cross, empty, s.past_names)

    def step(self, tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        """One decoder step over every row."""
        s = self.sessions
        positions, mask = state.step_inputs()
        feed = {
            names.DEC_INPUT_IDS: tokens.reshape(-1, 1).astype(np.int64, copy=False),
            names.DEC_ENCODER_MASK: state.encoder_mask,
            names.DEC_POSITIONS: positions,
            names.DEC_SELF_MASK: mask,
            **state.past,
            **state.cross,
        }
        log_probs, *present = s.decoder.run([names.DEC_LOG_PROBS, *s.present_names], feed)
        state.past = dict(zip(s.past_names, present, strict=True))
        state.stepped(mask)
        return np.asarray(log_probs)

    def reorder(self, state: DecoderState, rows: np.ndarray | None, sentences: np.ndarray | None) -> None:
        """Gather on the host with ``transduce.engine.cache.reorder``."""
        if rows is not None:
            state.past = reorder(state.past, rows)
        if sentences is not None:
            state.cross = reorder(state.cross, sentences)
        state.reorder_host(rows, sentences)

    def merge(self, state: DecoderState, other: DecoderState) -> DecoderState:
        """Concatenate rows and sentences; caches padded at the start, cross K/V at the end of the source."""
        encoder_mask, self_mask, positions, pad_a, pad_b = merged_host(state, other)
        S = encoder_mask.shape[1]
        cross = {
            n: np.concatenate([pad_axis2(a, 0, S - a.shape[2]), pad_axis2(b, 0, S - b.shape[2])])
            for (n, a), b in zip(state.cross.items(), other.cross.values(), strict=True)
        }
        past = {
            n: np.concatenate([pad_axis2(a, pad_a, 0), pad_axis2(b, pad_b, 0)])
            for (n, a), b in zip(state.past.items(), other.past.values(), strict=True)
        }
        return DecoderState(encoder_mask, cross, past, positions, self_mask)

    def trim(self, state: DecoderState) -> None:
        """Slice off the leading cache positions no row attends to."""
        cut = state.padding_to_trim()
        if cut:
            state.past = {n: t[:, :, cut:] for n, t in state.past.items()}
            state.self_mask = state.self_mask[:, cut:]
