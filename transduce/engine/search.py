"""Search strategies as small objects (advance / is_done / finalize) driven by per-row log-probs; numpy only.

Greedy search is here, beam search in ``transduce.engine.beam``. Both can take on new sentences between two steps
(``join``), each with its own step count, so a running batch searches all its sentences of one set of options with
one object (``transduce.engine.running``). A row's generated ids are kept left-padded with -1 in an (R, T) array,
T the longest history; padding no row needs is cut off as rows leave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from transduce.engine.options import DecodeOptions

_BLOCK = 64  # top_k: columns per (strided) block on long rows


@dataclass(frozen=True)
class Hypothesis:
    """A finished translation: generated ids without start token and eos, and its length-normalised score."""

    tokens: list[int]
    score: float


@dataclass(frozen=True)
class StepOutput:
    """What the decoding loop needs after one step."""

    tokens: np.ndarray  # (R',) int64: next input token of each surviving row
    parent_rows: np.ndarray  # (R',) int64: row of the previous step each surviving row continues (cache gather)
    parent_sentences: np.ndarray  # (N',) int64: previous position of each surviving sentence (per-sentence gather)
    reordered: bool = True  # False: every row survived in place (the parents are the identity, no gather needed)


@runtime_checkable
class SearchStrategy(Protocol):
    """The interface the decoding loop drives."""

    def advance(self, log_probs: np.ndarray) -> StepOutput: ...

    def is_done(self) -> bool: ...

    def finalize(self) -> list[list[Hypothesis]]: ...

    def take_finished(self, *, forget: bool = False) -> list[tuple[int, list[Hypothesis]]]: ...

    def drop(self, sentences: Sequence[int]) -> tuple[np.ndarray, np.ndarray]: ...

    def join(self, max_lengths: Sequence[int]) -> int: ...

    def remap(self, positions: np.ndarray, eos_id: int) -> None: ...

    @property
    def row_sentence(self) -> np.ndarray: ...


# per row the k largest entries, best first, ties to the lower id: (x (R, V), k) -> ids (R, k) int64, values (R, k)
TopK = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def length_penalty(length: int | np.ndarray, alpha: float) -> float | np.ndarray:
    """GNMT length penalty ((5 + L) / 6) ** alpha (Wu et al. 2016), used by the paper with alpha = 0.6."""
    return ((5.0 + length) / 6.0) ** alpha


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row the k largest entries, best first, ties to the lower id: (R, V) -> ids (R, k), values (R, k) (>= f32)."""
    if x.dtype == np.float16:  # numpy emulates float16 arithmetic; float32 holds every value exactly and is faster
        x = x.astype(np.float32)
    R, V = x.shape
    if not 1 <= k <= V:
        raise ValueError(f"k must be between 1 and the row length ({V}), got {k}")
    b = min(_BLOCK, V // (8 * k))  # block size; a row has n_blocks strided blocks {g, g + n_blocks, ...}
    if b < 2:  # short rows: a stable sort is exact and cheap
        ids = np.argsort(-x, axis=1, kind="stable")[:, :k]  # (R, k)
        return ids.astype(np.int64), np.take_along_axis(x, ids, axis=1)
    n_blocks = V // b
    block_max = x[:, : b * n_blocks].reshape(R, b, n_blocks).max(axis=1)  # (R, n_blocks)
    blocks, block_val = _argmax_k(block_max, k)  # (R, k) best blocks; block_max now has them masked out
    # Every top-k entry lies in the k best blocks unless another block ties with the k-th one (handled below).
    blocks.sort(axis=1)
    cand = (np.arange(b)[None, :, None] * n_blocks + blocks[:, None, :]).reshape(R, b * k)  # ascending column ids
    if b * n_blocks < V:  # the tail columns outside the blocks are always candidates
        cand = np.concatenate([cand, np.broadcast_to(np.arange(b * n_blocks, V), (R, V - b * n_blocks))], axis=1)
    pos, val = _argmax_k(np.take_along_axis(x, cand, axis=1), k)  # (R, k)
    ids = np.take_along_axis(cand, pos, axis=1)
    # Exact fallback: a tie with an unselected block, or fewer than k real (> -inf) entries.
    fallback = np.flatnonzero((block_max.max(axis=1) >= block_val[:, -1]) | ~(val[:, -1] > -np.inf))
    for r in fallback.tolist():  # every top-k entry is >= the k-th block maximum
        cand_r = np.flatnonzero(x[r] >= block_val[r, -1])  # ascending ids, so the stable sort breaks ties by id
        ids[r] = cand_r[np.argsort(-x[r, cand_r], kind="stable")[:k]]
        val[r] = x[r, ids[r]]
    return ids.astype(np.int64), val


def _argmax_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k rounds of arg-max (first maximum wins) on a scratch (R, C) array, masking each pick with -inf."""
    rows = np.arange(x.shape[0])
    ids = np.empty((x.shape[0], k), dtype=np.int64)  # (R, k)
    vals = np.empty((x.shape[0], k), dtype=x.dtype)  # (R, k)
    for j in range(k):
        best = x.argmax(axis=1)  # (R,)
        ids[:, j], vals[:, j] = best, x[rows, best]
        x[rows, best] = -np.inf
    return ids, vals


def repeat_bans(seqs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Which ids each row must not choose next: those that would complete an n-gram its hypothesis already holds.
    (R, T) generated ids, left-padded with -1 -> (rows, ids) to mask, or None when no row has any (n = 0: off)."""
    R, T = seqs.shape
    if n < 2 or n > T:
        return None
    W = T - n + 1  # n-grams per row; the row's last n - 1 ids are seqs[:, W:]
    match = seqs[:, :W] == seqs[:, W : W + 1]  # (R, W): n-grams whose first id is the row's end's first
    for i in range(1, n - 1):  # one column of the end at a time: a few small compares, no (R, W, n) windows
        if not match.any():
            return None
        match &= seqs[:, i : W + i] == seqs[:, W + i : W + i + 1]
    rows, at = np.nonzero(match)
    ids = seqs[rows, at + n - 1]
    real = ids >= 0  # a row with fewer than n - 1 ids of its own matches only its left padding (-1)
    return (rows[real], ids[real]) if real.any() else None


def _masked(log_probs: np.ndarray, bans: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """``log_probs`` with the banned (row, id) pairs at -inf: one copy, so the caller's array stays as it was."""
    if bans is None:
        return log_probs
    log_probs = log_probs.copy()
    log_probs[bans] = -np.inf
    return log_probs


def _check(batch_size: int, eos_id: int, max_lengths: Sequence[int], min_length: int, alpha: float) -> np.ndarray:
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    if len(max_lengths) != batch_size:
        raise ValueError(f"max_lengths needs one entry per sentence ({batch_size}), got {len(max_lengths)}")
    lengths = np.asarray(max_lengths, dtype=np.int64).reshape(batch_size)
    if batch_size and lengths.min() < 1:
        raise ValueError(f"every max_lengths entry must be >= 1, got {int(lengths.min())}")
    if eos_id < 0:
        raise ValueError(f"eos_id must be a vocabulary id >= 0, got {eos_id}")
    if min_length < 0:
        raise ValueError(f"min_length must be >= 0, got {min_length}")
    if not alpha >= 0:
        raise ValueError(f"length_penalty (alpha) must be >= 0 (0 = raw log-prob sum), got {alpha}")
    return lengths


def _check_log_probs(log_probs: np.ndarray, n_rows: int, eos_id: int, done: bool) -> np.ndarray:
    if done:
        raise ValueError("advance() called after the search is done (check is_done())")
    log_probs = np.asarray(log_probs)
    if log_probs.ndim != 2 or log_probs.shape[0] != n_rows:
        raise ValueError(f"log_probs must have shape (rows={n_rows}, vocab), got {log_probs.shape}")
    if eos_id >= log_probs.shape[1]:
        raise ValueError(f"eos_id {eos_id} is outside the vocabulary ({log_probs.shape[1]} log-probs per row)")
    return log_probs


def _grown(seqs: np.ndarray, tokens: np.ndarray, longest: int) -> np.ndarray:
    """(R, T) left-padded histories and this step's ids (R,) -> (R, <= T + 1), without the padding columns no row
    needs (``longest``: the longest history, this step's id included)."""
    out = np.concatenate([seqs, tokens[:, None]], axis=1)
    return out[:, out.shape[1] - longest :] if longest < out.shape[1] else out


def _history(seqs: np.ndarray, row: int, length: int) -> list[int]:
    """The last ``length`` generated ids of ``row`` (what precedes them is padding or belongs to no one)."""
    return seqs[row, seqs.shape[1] - length :].tolist()


def _read_only_range(n: int) -> np.ndarray:
    index = np.arange(n, dtype=np.int64)
    index.flags.writeable = False
    return index


class _Held:
    """What greedy and beam search share about their sentences: joiners numbered on from the sentences so far, the
    hypotheses finished per sentence (so far, for beam) and which finished since the last take_finished(), and
    moving ids to new columns (``remap``)."""

    eos_id: int
    min_length: int
    alpha: float
    _seqs: np.ndarray  # (R, T) generated ids, left-padded with -1

    def _hold(self, batch_size: int) -> None:
        self._held: dict[int, list[Hypothesis]] = {}  # by sentence
        self._just_finished: list[int] = []  # sentences finished since the last take_finished()
        self._count = batch_size  # sentences so far (joined ones included)
        self._min_step = 0  # at most the smallest row step count: the min-length work runs only while it is below

    def _newcomers(self, max_lengths: Sequence[int]) -> tuple[int, np.ndarray]:
        """Number ``len(max_lengths)`` joining sentences: the first one's index and their checked max lengths."""
        n = len(max_lengths)
        lengths = _check(n, self.eos_id, max_lengths, self.min_length, self.alpha)
        first, self._count = self._count, self._count + n
        self._min_step = 0
        return first, lengths

    def _taken(self, forget: bool) -> list[tuple[int, list[Hypothesis]]]:
        """The sentences finished since the last call with their held hypotheses (``forget``: no longer held)."""
        done, self._just_finished = self._just_finished, []
        return [(i, self._held.pop(i, []) if forget else self._held.get(i, [])) for i in done]

    def _forget(self, sentences: Sequence[int]) -> None:
        """Dropped ``sentences`` get no result, also those that finished in the step they were dropped after."""
        gone = set(sentences)
        for i in gone:
            self._held.pop(i, None)
        self._just_finished = [i for i in self._just_finished if i not in gone]

    def remap(self, positions: np.ndarray, eos_id: int) -> None:
        """The log-probs' columns change meaning (a vocabulary shortlist's candidates were rebuilt): every id ``i``
        held so far becomes ``positions[i]``, and eos is ``eos_id``."""
        self._seqs = np.where(self._seqs >= 0, positions[self._seqs], -1)  # padding stays -1
        self._held = {
            i: [Hypothesis(positions[h.tokens].tolist(), h.score) for h in hyps] for i, hyps in self._held.items()
        }
        self.eos_id = eos_id


class GreedySearch(_Held):
    """Arg-max decoding (beam_size=1): a row leaves as soon as it emits eos or reaches its max length."""

    def __init__(
        self,
        batch_size: int,
        *,
        eos_id: int,
        max_lengths: Sequence[int],
        min_length: int = 0,
        length_penalty: float = 0.0,
        no_repeat_ngram_size: int = 0,
    ) -> None:
        lengths = _check(batch_size, eos_id, max_lengths, min_length, length_penalty)
        self.eos_id, self.min_length, self.alpha = eos_id, min_length, length_penalty
        self.no_repeat = no_repeat_ngram_size  # see repeat_bans; 0 = off
        self._rows = np.arange(batch_size, dtype=np.int64)  # (R,) sentence of each row
        self._index = _read_only_range(batch_size)  # its first R entries are "every row", handed out
        self._row_max = lengths.copy()  # (R,) max length of each row's sentence
        self._row_step = np.zeros(batch_size, dtype=np.int64)  # (R,) ids each row generated so far
        self._seqs = np.zeros((batch_size, 0), dtype=np.int64)  # (R, T) generated ids, left-padded with -1
        self._scores = np.zeros(batch_size, dtype=np.float64)  # (R,) summed log-probs
        self._hold(batch_size)

    @property
    def row_sentence(self) -> np.ndarray:
        """(R,) original sentence index of each active row."""
        return self._rows

    def is_done(self) -> bool:
        """True when every sentence has finished."""
        return len(self._rows) == 0

    def advance(self, log_probs: np.ndarray) -> StepOutput:
        """Pick the best token of every row (lowest id on ties); rows that emit eos or reach max length leave."""
        log_probs = _check_log_probs(log_probs, len(self._rows), self.eos_id, self.is_done())
        if self.no_repeat:
            log_probs = _masked(log_probs, repeat_bans(self._seqs, self.no_repeat))
        R = len(self._rows)
        best = log_probs.argmax(axis=1)  # (R,) first maximum = lowest id on ties
        if self._min_step < self.min_length:  # eos forbidden before min_length: re-pick only the rows that chose it
            banned = np.flatnonzero((best == self.eos_id) & (self._row_step < self.min_length))
            if len(banned):
                sub = log_probs[banned].copy()  # (r, V)
                sub[:, self.eos_id] = -np.inf
                best[banned] = sub.argmax(axis=1)
        same = self._index[:R]
        self._scores += log_probs[same, best]
        self._row_step += 1
        self._min_step += 1
        ended = (best == self.eos_id) | (self._row_max <= self._row_step)  # (R,)
        if not ended.any():  # the common step: every row goes on in place
            best = best.astype(np.int64, copy=False)
            self._seqs = np.concatenate([self._seqs, best[:, None]], axis=1)
            return StepOutput(best, same, same, reordered=False)
        for r in np.flatnonzero(ended).tolist():
            n = int(self._row_step[r])  # ids generated, this step's included
            tokens = _history(self._seqs, r, n - 1) + ([] if best[r] == self.eos_id else [int(best[r])])
            lp = float(length_penalty(n, self.alpha))
            self._held[int(self._rows[r])] = [Hypothesis(tokens, float(self._scores[r] / lp))]
            self._just_finished.append(int(self._rows[r]))
        parents = np.flatnonzero(~ended).astype(np.int64)  # (R',)
        tokens_next = best[parents].astype(np.int64)  # (R',)
        self._rows, self._row_max, self._row_step = self._rows[parents], self._row_max[parents], self._row_step[parents]
        longest = int(self._row_step.max()) if len(parents) else 0
        self._seqs = _grown(self._seqs[parents], tokens_next, longest)
        self._scores = self._scores[parents]
        return StepOutput(tokens_next, parents, parents)

    def finalize(self) -> list[list[Hypothesis]]:
        """One hypothesis per sentence, in input order (empty for a sentence still running, dropped or forgotten)."""
        return [list(self._held.get(i, [])) for i in range(self._count)]

    def take_finished(self, *, forget: bool = False) -> list[tuple[int, list[Hypothesis]]]:
        """(sentence, its hypothesis) of every sentence that finished since the last call; ``forget``: the search
        keeps no copy (finalize() will not list them), so a long-running search does not grow."""
        return [(i, list(hyps)) for i, hyps in self._taken(forget)]

    def drop(self, sentences: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stop searching for ``sentences`` (they get no result); returns which current rows and which current
        sentences stay, as boolean masks (here rows are sentences), to filter the last StepOutput with."""
        keep = ~np.isin(self._rows, np.asarray(sentences, dtype=np.int64))  # (R,)
        self._rows, self._seqs, self._scores = self._rows[keep], self._seqs[keep], self._scores[keep]
        self._row_max, self._row_step = self._row_max[keep], self._row_step[keep]
        self._forget(sentences)
        return keep, keep

    def join(self, max_lengths: Sequence[int]) -> int:
        """Take on ``len(max_lengths)`` new sentences, one row each after the current rows, with no history yet;
        returns the index of the first (they are numbered on from the sentences so far)."""
        first, lengths = self._newcomers(max_lengths)
        n = len(lengths)
        self._rows = np.concatenate([self._rows, np.arange(first, first + n, dtype=np.int64)])
        self._row_max = np.concatenate([self._row_max, lengths])
        self._row_step = np.concatenate([self._row_step, np.zeros(n, np.int64)])
        self._scores = np.concatenate([self._scores, np.zeros(n)])
        self._seqs = np.concatenate([self._seqs, np.full((n, self._seqs.shape[1]), -1, np.int64)])
        if len(self._rows) > len(self._index):
            self._index = _read_only_range(len(self._rows))
        return first


def make_search(
    batch_size: int,
    options: DecodeOptions,
    *,
    eos_id: int,
    max_lengths: Sequence[int],
    full_rows: bool = False,
    select_top_k: TopK = top_k,
) -> SearchStrategy:
    """The strategy ``options`` ask for: greedy for beam_size 1, else beam search (see BeamSearch's full_rows; it
    selects each row's best tokens with ``select_top_k``)."""
    from transduce.engine.beam import BeamSearch  # beam.py builds on this module

    if options.beam_size == 1:
        return GreedySearch(
            batch_size,
            eos_id=eos_id,
            max_lengths=max_lengths,
            min_length=options.min_decoding_length,
            length_penalty=options.length_penalty,
            no_repeat_ngram_size=options.no_repeat_ngram_size,
        )
    return BeamSearch(
        batch_size,
        beam_size=options.beam_size,
        eos_id=eos_id,
        max_lengths=max_lengths,
        num_hypotheses=options.num_hypotheses,
        length_penalty=options.length_penalty,
        min_length=options.min_decoding_length,
        full_rows=full_rows,
        select_top_k=select_top_k,
        no_repeat_ngram_size=options.no_repeat_ngram_size,
    )
