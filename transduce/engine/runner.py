"""The decoder-runner interface the translator and the scheduler drive: encode once, step the decoder, reorder caches,
and merge newly encoded sentences into a running batch.

Two implementations share it: ``NumpyRunner`` (host arrays, CPU) and ``IOBindingRunner`` (device-resident encoder
outputs and caches, CUDA); ``transduce.engine.session.open_runner`` picks one for the sessions it opened. The small
per-row bookkeeping (positions, self-attention mask, source mask) always lives on the host, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnxruntime as ort

from transduce.engine import io_names as names
from transduce.engine.embedding import Embedding
from transduce.engine.manifest import Manifest
from transduce.engine.ortrun import Run, unchecked_run
from transduce.engine.search import TopK
from transduce.engine.search import top_k as numpy_top_k
from transduce.engine.shortlist import ProjectionRows, Shortlist

CUDA = "CUDAExecutionProvider"


@dataclass
class DecoderState:
    """Everything the next decoder step reads: per sentence (N rows) and per active hypothesis (R = N * k rows).

    Rows that joined later have shorter histories: every row's cache has the batch's length P, padded at the start,
    and ``self_mask`` hides the padding; ``positions`` is each row's own decoding step."""

    encoder_mask: np.ndarray  # (N, S) int64, 1 = source token
    cross: dict[str, Any]  # cross-attention K/V by input name, each (N, h, S, d_k): numpy arrays or OrtValues
    past: dict[str, Any]  # self-attention K/V by input name, each (R, h, P, d_k)
    positions: np.ndarray  # (R,) int64: the position of each row's next token
    self_mask: np.ndarray  # (R, P) int64: 1 where a row's cache holds its own history
    # the projection rows of the batch's shortlist candidates (C of them): log-probs are then (R, C) over them and the
    # search works in candidate positions; None = the whole vocabulary (see transduce.engine.shortlist)
    projection: ProjectionRows | None = None
    # (R, C) bool: each row's own candidates among the projection's (its sentence's), so the log-probs of a row do not
    # depend on its batch-mates; None = every candidate (or a shortlist graph exported without the mask input)
    vocab_mask: np.ndarray | None = None

    @property
    def rows(self) -> int:
        """R, the active hypotheses."""
        return len(self.positions)

    def step_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions (R,) and the mask over the cache plus the new token (R, P + 1) for the next step."""
        return self.positions, np.concatenate([self.self_mask, np.ones((self.rows, 1), np.int64)], axis=1)

    def stepped(self, mask: np.ndarray) -> None:
        """Record a step whose mask was ``mask``: every row's history is one token longer."""
        self.self_mask, self.positions = mask, self.positions + 1

    def reorder_host(self, rows: np.ndarray | None, sentences: np.ndarray | None) -> None:
        """Gather the host-side per-row and per-sentence arrays (None: keep)."""
        if rows is not None:
            self.positions, self.self_mask = self.positions[rows], self.self_mask[rows]
            if self.vocab_mask is not None:
                self.vocab_mask = self.vocab_mask[rows]
        if sentences is not None:
            self.encoder_mask = self.encoder_mask[sentences]

    def source_columns_used(self) -> int:
        """Source positions up to the last one any sentence has (the rest is padding left by longer sources)."""
        used = np.flatnonzero(self.encoder_mask.any(axis=0))
        return int(used[-1]) + 1 if len(used) else 0

    def padding_to_trim(self) -> int:
        """Cache positions at the start that every row masks (they can be cut off)."""
        if self.rows == 0 or self.self_mask.shape[1] == 0:
            return self.self_mask.shape[1]
        return int(self.self_mask.argmax(axis=1).min()) if self.self_mask.any(axis=1).all() else 0


def merged_host(a: DecoderState, b: DecoderState) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The host arrays of ``b`` appended to ``a`` (source masks padded to the longer source, self masks padded at the
    start to the longer history); returns them and how many positions a's and b's caches must be padded by."""
    if a.projection is not None or b.projection is not None or a.vocab_mask is not None or b.vocab_mask is not None:
        raise ValueError("a state decoding over a vocabulary shortlist cannot be merged (candidates differ per batch)")
    Sa, Sb = a.encoder_mask.shape[1], b.encoder_mask.shape[1]
    S = max(Sa, Sb)
    encoder_mask = np.concatenate(
        [np.pad(a.encoder_mask, ((0, 0), (0, S - Sa))), np.pad(b.encoder_mask, ((0, 0), (0, S - Sb)))]
    )
    Pa, Pb = a.self_mask.shape[1], b.self_mask.shape[1]
    P = max(Pa, Pb)
    self_mask = np.concatenate([np.pad(a.self_mask, ((0, 0), (P - Pa, 0))), np.pad(b.self_mask, ((0, 0), (P - Pb, 0)))])
    return encoder_mask, self_mask, np.concatenate([a.positions, b.positions]), P - Pa, P - Pb


def empty_state(
    encoder_mask: np.ndarray, cross: dict[str, Any], empty_cache: Any, past_names: list[str]
) -> DecoderState:
    """The state right after encoding: one row per sentence, no history."""
    N = encoder_mask.shape[0]
    return DecoderState(
        encoder_mask,
        cross,
        dict.fromkeys(past_names, empty_cache),
        np.zeros(N, np.int64),
        np.zeros((N, 0), np.int64),
    )


@dataclass
class OrtSessions:
    """The encoder and decoder-step sessions of one model directory, with the I/O names their runners bind."""

    manifest: Manifest
    encoder: ort.InferenceSession
    decoder: ort.InferenceSession
    providers: list[str]  # what the sessions were asked for (a runner opening another session asks for the same)
    options: ort.SessionOptions  # options like the decoder's (without its given initializers), for helper sessions
    shortlist: Shortlist | None = None  # set when the decoder is the shortlist graph (its projection is an input)
    shortlist_masks: bool = False  # the shortlist graph takes per-row candidate masks (exports since revision 3)
    top_k: TopK = numpy_top_k  # the beam search's per-row top-k: numpy's, or onnxruntime's kernel (engine.topk)
    embedding: Embedding | None = None  # the table the sessions gather from, kept alive with them (engine.embedding)
    cross_names: list[str] = field(init=False)
    past_names: list[str] = field(init=False)
    present_names: list[str] = field(init=False)
    encoder_run: Run = field(init=False)  # the sessions' run, without the Python wrapper's checks (engine.ortrun)
    decoder_run: Run = field(init=False)

    def __post_init__(self) -> None:
        self.encoder_run, self.decoder_run = unchecked_run(self.encoder), unchecked_run(self.decoder)
        L = self.manifest.n_layers
        self.cross_names, self.past_names = names.cross_names(L), names.past_names(L)
        self.present_names = names.present_names(L)

    @property
    def provider(self) -> str:
        """The execution provider the decoder really runs on (CUDA can silently fall back to CPU)."""
        return str(self.decoder.get_providers()[0])

    def empty_cache_shape(self, rows: int) -> tuple[int, int, int, int]:
        """Shape of an empty self-attention cache: (rows, heads, 0, d_k)."""
        return rows, self.manifest.n_heads, 0, self.manifest.d_k


class DecoderRunner(Protocol):
    """What the translator's decoding loop and the scheduler call."""

    sessions: OrtSessions
    # greedy rows that finish may stay in the state until a quarter of it has (decoding.decode_on): where a
    # gather copies every cache on the host; on a device a gather is cheap and extra rows cost a host copy of their
    # log-probs (not measured on a GPU)
    defers_compaction: bool

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> DecoderState:
        """Run the encoder once: (B, S) ids and mask -> a decoder state with cross K/V and an empty self cache."""
        ...

    def step(self, tokens: np.ndarray, state: DecoderState) -> np.ndarray:
        """Feed one token per row (R,) -> log-probs (R, V) on the host (R, C over ``state.projection``'s candidates);
        the state's self cache grows by one."""
        ...

    def reorder(self, state: DecoderState, rows: np.ndarray | None, sentences: np.ndarray | None) -> None:
        """Gather every layer's self cache by ``rows`` and the per-sentence tensors by ``sentences`` (None: keep)."""
        ...

    def merge(self, state: DecoderState, other: DecoderState) -> DecoderState:
        """``state`` with ``other``'s sentences and rows appended after its own (caches padded to fit)."""
        ...

    def trim(self, state: DecoderState) -> None:
        """Cut the cache positions that every row masks (after the longest histories left)."""
        ...
