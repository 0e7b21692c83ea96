"""The CPU runner: encoder outputs and caches are numpy arrays that go in and out of every session run."""

from __future__ import annotations

import numpy as np

from transduce.engine import io_names as names
from transduce.engine.cache import reorder
from transduce.engine.runner import DecoderState, OrtSessions, empty_state, merged_host


class NumpyRunner:
    """Host-memory decoder runner (see ``transduce.engine.runner.DecoderRunner``)."""

    defers_compaction = True

    def __init__(self, sessions: OrtSessions) -> None:
        self.sessions = sessions

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> DecoderState:
        """Cross K/V of every layer from one encoder run, and an empty self cache per row."""
        s = self.sessions
        feed = {names.ENC_INPUT_IDS: input_ids, names.ENC_ATTENTION_MASK: attention_mask}
        cross = dict(zip(s.cross_names, s.encoder_run(s.cross_names, feed), strict=True))
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
        if s.shortlist is not None:  # the shortlist graph: the batch's candidate rows, or every row
            rows = s.shortlist.every_row() if state.projection is None else state.projection
            feed.update(rows.feeds)
            if s.shortlist_masks:
                own = state.vocab_mask
                feed[names.DEC_VOCAB_MASK] = np.ones((len(tokens), rows.count), bool) if own is None else own
        log_probs, *present = s.decoder_run([names.DEC_LOG_PROBS, *s.present_names], feed)
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
        """Concatenate rows and sentences; caches padded at the start, cross K/V at the end of the source. Each
        tensor is written once into a new array (no padded intermediate copies)."""
        encoder_mask, self_mask, positions, pad_a, pad_b = merged_host(state, other)
        S = encoder_mask.shape[1]
        pairs = zip(state.cross.items(), other.cross.values(), strict=True)
        cross = {n: _stacked(a, b, S, at_start=False) for (n, a), b in pairs}
        P = self_mask.shape[1]
        pairs = zip(state.past.items(), other.past.values(), strict=True)
        past = {n: _stacked(a, b, P, at_start=True) for (n, a), b in pairs}
        return DecoderState(encoder_mask, cross, past, positions, self_mask)

    def trim(self, state: DecoderState) -> None:
        """Slice off the leading cache positions no row attends to, and the trailing source positions no sentence
        has (after the longest sources left; the cross K/V are copied once, when a quarter or more can go)."""
        cut = state.padding_to_trim()
        if cut:
            state.past = {n: t[:, :, cut:] for n, t in state.past.items()}
            state.self_mask = state.self_mask[:, cut:]
        S, keep = state.encoder_mask.shape[1], state.source_columns_used()
        if keep < S and (S - keep) * 4 >= S:
            state.cross = {n: np.ascontiguousarray(t[:, :, :keep]) for n, t in state.cross.items()}
            state.encoder_mask = np.ascontiguousarray(state.encoder_mask[:, :keep])


def _stacked(a: np.ndarray, b: np.ndarray, length: int, *, at_start: bool) -> np.ndarray:
    """``a``'s rows then ``b``'s along axis 0, each zero-padded on axis 2 to ``length`` (before or after)."""
    out = np.empty((a.shape[0] + b.shape[0], a.shape[1], length, a.shape[3]), dtype=a.dtype)
    for rows, t in ((slice(0, a.shape[0]), a), (slice(a.shape[0], None), b)):
        pad = length - t.shape[2]
        filled = slice(pad, length) if at_start else slice(0, t.shape[2])
        out[rows, :, filled] = t
        if pad:
            out[rows, :, slice(0, pad) if at_start else slice(t.shape[2], length)] = 0
    return out
