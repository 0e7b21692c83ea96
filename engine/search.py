"""Search strategies as small objects (advance / is_done / finalize) driven by per-row log-probs; numpy only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


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
    batch_changed: bool  # the set of sentences behind the rows changed: per-sentence tensors need the gather too


class SearchStrategy(Protocol):
    """The interface the decoding loop drives."""

    def advance(self, log_probs: np.ndarray) -> StepOutput: ...

    def is_done(self) -> bool: ...

    def finalize(self) -> list[list[Hypothesis]]: ...

    @property
    def row_sentence(self) -> np.ndarray: ...


def length_penalty(length: int | np.ndarray, alpha: float) -> float | np.ndarray:
    """GNMT length penalty ((5 + L) / 6) ** alpha (Wu et al. 2016), used by the paper with alpha = 0.6."""
    return ((5.0 + length) / 6.0) ** alpha


def _check(batch_size: int, eos_id: int, max_lengths: Sequence[int], min_length: int, alpha: float) -> np.ndarray:
    if batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    if len(max_lengths) != batch_size:
        raise ValueError(f"max_lengths needs one entry per sentence ({batch_size}), got {len(max_lengths)}")
    lengths = np.asarray(max_lengths, dtype=np.int64)
    if batch_size and lengths.min() < 1:
        raise ValueError("every max_lengths entry must be >= 1")
    if min_length < 0 or alpha < 0 or eos_id < 0:
        raise ValueError("min_length, length_penalty and eos_id must be >= 0")
    return lengths


class GreedySearch:
    """Arg-max decoding (beam_size=1): a row leaves as soon as it emits eos or reaches its max length."""

    def __init__(
        self,
        batch_size: int,
        *,
        eos_id: int,
        max_lengths: Sequence[int],
        min_length: int = 0,
        length_penalty: float = 0.0,
    ) -> None:
        self.max_lengths = _check(batch_size, eos_id, max_lengths, min_length, length_penalty)
        self.eos_id, self.min_length, self.alpha = eos_id, min_length, length_penalty
        self._rows = np.arange(batch_size)  # (R,) sentence of each row
        self._tokens: list[list[int]] = [[] for _ in range(batch_size)]
        self._scores = np.zeros(batch_size, dtype=np.float64)
        self._results: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        self._step = 0

    @property
    def row_sentence(self) -> np.ndarray:
        """(R,) original sentence index of each active row."""
        return self._rows

    def is_done(self) -> bool:
        """True when every sentence has finished."""
        return len(self._rows) == 0

    def advance(self, log_probs: np.ndarray) -> StepOutput:
        """Pick the best token of every row; rows that finished leave."""
        assert log_probs.shape[0] == len(self._rows), "one log-prob row per active row"
        if self._step < self.min_length:
            log_probs = log_probs.copy()
            log_probs[:, self.eos_id] = -np.inf
        best = log_probs.argmax(axis=1)  # (R,) first maximum = lowest id on ties
        self._scores[self._rows] += log_probs[np.arange(len(best)), best]
        self._step += 1
        keep = np.ones(len(best), dtype=bool)
        for r, (sent, tok) in enumerate(zip(self._rows.tolist(), best.tolist(), strict=True)):
            if tok != self.eos_id:
                self._tokens[sent].append(tok)
            if tok == self.eos_id or self._step >= self.max_lengths[sent]:
                keep[r] = False
                length = self._step
                score = float(self._scores[sent] / length_penalty(length, self.alpha))
                self._results[sent] = [Hypothesis(self._tokens[sent], score)]
        parents = np.flatnonzero(keep)
        self._rows = self._rows[parents]
        return StepOutput(best[parents].astype(np.int64), parents.astype(np.int64), bool(not keep.all()))

    def finalize(self) -> list[list[Hypothesis]]:
        """One hypothesis per sentence, in input order."""
        return self._results


class BeamSearch:
    """Beam search with the GNMT length penalty; a sentence ends once ``beam_size`` hypotheses finished."""

    def __init__(
        self,
        batch_size: int,
        *,
        beam_size: int,
        eos_id: int,
        max_lengths: Sequence[int],
        num_hypotheses: int = 1,
        length_penalty: float = 0.6,
        min_length: int = 0,
    ) -> None:
        self.max_lengths = _check(batch_size, eos_id, max_lengths, min_length, length_penalty)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if not 1 <= num_hypotheses <= beam_size:
            raise ValueError(f"num_hypotheses must be between 1 and beam_size ({beam_size}), got {num_hypotheses}")
        self.beam, self.n_best, self.eos_id = beam_size, num_hypotheses, eos_id
        self.min_length, self.alpha = min_length, length_penalty
        self._alive = np.arange(batch_size)  # (N,) sentences still searching, in row order
        self._per_sentence = 1  # rows per alive sentence: 1 before the first step, beam afterwards
        self._seqs = np.zeros((batch_size, 0), dtype=np.int64)  # (R, step) generated ids of each row
        self._scores = np.zeros(batch_size, dtype=np.float64)  # (R,) summed log-probs
        self._finished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        self._step = 0

    @property
    def row_sentence(self) -> np.ndarray:
        """(R,) original sentence index of each active row."""
        return np.repeat(self._alive, self._per_sentence)

    def is_done(self) -> bool:
        """True when every sentence has finished."""
        return len(self._alive) == 0

    def advance(self, log_probs: np.ndarray) -> StepOutput:
        """Expand every beam by one token, move eos candidates to the finished lists, keep the best beam_size."""
        N, k = len(self._alive), self._per_sentence
        R, V = log_probs.shape
        assert N * k == R, "one log-prob row per active row"
        if self._step < self.min_length:
            log_probs = log_probs.copy()
            log_probs[:, self.eos_id] = -np.inf
        total = (self._scores[:, None] + log_probs).reshape(N, k * V)  # (N, k*V) candidate scores
        n_cand = min(2 * self.beam, k * V)
        top = (
            np.argpartition(-total, n_cand - 1, axis=1)[:, :n_cand]
            if n_cand < k * V
            else np.tile(np.arange(k * V), (N, 1))
        )
        top_scores = np.take_along_axis(total, top, axis=1)
        order = np.lexsort((top, -top_scores), axis=1)  # best first; ties: lower flat index first
        top, top_scores = np.take_along_axis(top, order, axis=1), np.take_along_axis(top_scores, order, axis=1)
        self._step += 1
        parents: list[int] = []
        tokens: list[int] = []
        scores: list[float] = []
        still_alive: list[int] = []
        for i, sent in enumerate(self._alive.tolist()):
            finished, at_max = self._finished[sent], self._step >= self.max_lengths[sent]
            beam: list[tuple[int, int, float]] = []  # (row, token, score) continuing this sentence
            for rank, (flat, score) in enumerate(zip(top[i].tolist(), top_scores[i].tolist(), strict=True)):
                if score == -np.inf or len(beam) == self.beam:
                    break
                row, tok = i * k + flat // V, flat % V
                if tok == self.eos_id:
                    if rank < self.beam:  # as fairseq: eos counts only among the top beam_size candidates
                        finished.append(self._hypothesis(self._seqs[row].tolist(), score))
                else:
                    beam.append((row, tok, score))
            if at_max:  # out of length: the open hypotheses end here
                finished.extend(self._hypothesis([*self._seqs[row].tolist(), tok], sc) for row, tok, sc in beam)
            elif len(finished) < self.beam:
                still_alive.append(sent)
                for row, tok, sc in beam:
                    parents.append(row)
                    tokens.append(tok)
                    scores.append(sc)
        parent_rows = np.asarray(parents, dtype=np.int64)
        changed = len(still_alive) != N or k != self.beam
        self._seqs = np.concatenate([self._seqs[parent_rows], np.asarray(tokens, np.int64)[:, None]], axis=1)
        self._scores = np.asarray(scores, dtype=np.float64)
        self._alive = np.asarray(still_alive, dtype=np.int64)
        self._per_sentence = self.beam
        return StepOutput(np.asarray(tokens, dtype=np.int64), parent_rows, changed)

    def _hypothesis(self, tokens: list[int], score: float) -> Hypothesis:
        return Hypothesis(tokens, score / float(length_penalty(self._step, self.alpha)))

    def finalize(self) -> list[list[Hypothesis]]:
        """The ``num_hypotheses`` best finished hypotheses of every sentence, best first."""
        return [sorted(f, key=lambda h: -h.score)[: self.n_best] for f in self._finished]
