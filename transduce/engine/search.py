"""Search strategies as small objects (advance / is_done / finalize) driven by per-row log-probs; numpy only."""

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

    def take_finished(self) -> list[tuple[int, list[Hypothesis]]]: ...

    def drop(self, sentences: Sequence[int]) -> tuple[np.ndarray, np.ndarray]: ...

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
    (R, T) generated ids -> (rows, ids) to mask, or None when no row has any (n = 0: off)."""
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
    return (rows, seqs[rows, at + n - 1]) if len(rows) else None


def _masked(log_probs: np.ndarray, bans: tuple[np.ndarray, np.ndarray] | None, column: int | None = None) -> np.ndarray:
    """``log_probs`` with the banned (row, id) pairs and, if given, a whole column at -inf: one copy, so the caller's
    array stays as it was."""
    if bans is None and column is None:
        return log_probs
    log_probs = log_probs.copy()
    if bans is not None:
        log_probs[bans] = -np.inf
    if column is not None:
        log_probs[:, column] = -np.inf
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
        no_repeat_ngram_size: int = 0,
    ) -> None:
        self.max_lengths = _check(batch_size, eos_id, max_lengths, min_length, length_penalty)
        self.eos_id, self.min_length, self.alpha = eos_id, min_length, length_penalty
        self.no_repeat = no_repeat_ngram_size  # see repeat_bans; 0 = off
        self._rows = np.arange(batch_size, dtype=np.int64)  # (R,) sentence of each row
        self._index = np.arange(batch_size, dtype=np.int64)  # its first R entries are "every row", handed out
        self._index.flags.writeable = False
        self._row_max = self.max_lengths.copy()  # (R,) max length of each row's sentence
        self._seqs = np.zeros((batch_size, 0), dtype=np.int64)  # (R, step) generated ids of each row
        self._scores = np.zeros(batch_size, dtype=np.float64)  # (R,) summed log-probs
        self._results: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        self._just_finished: list[int] = []  # sentences finished since the last take_finished()
        self._step = 0

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
        if self._step < self.min_length:  # eos forbidden: re-pick only the rows that chose it
            banned = np.flatnonzero(best == self.eos_id)
            if len(banned):
                sub = log_probs[banned].copy()  # (r, V)
                sub[:, self.eos_id] = -np.inf
                best[banned] = sub.argmax(axis=1)
        same = self._index[:R]
        self._scores += log_probs[same, best]
        self._step += 1
        ended = (best == self.eos_id) | (self._row_max <= self._step)  # (R,)
        if not ended.any():  # the common step: every row goes on in place
            best = best.astype(np.int64, copy=False)
            self._seqs = np.concatenate([self._seqs, best[:, None]], axis=1)
            return StepOutput(best, same, same, reordered=False)
        lp = float(length_penalty(self._step, self.alpha))
        for r in np.flatnonzero(ended).tolist():
            tokens = self._seqs[r].tolist() + ([] if best[r] == self.eos_id else [int(best[r])])
            self._results[int(self._rows[r])] = [Hypothesis(tokens, float(self._scores[r] / lp))]
            self._just_finished.append(int(self._rows[r]))
        parents = np.flatnonzero(~ended).astype(np.int64)  # (R',)
        tokens_next = best[parents].astype(np.int64)  # (R',)
        self._rows, self._row_max = self._rows[parents], self._row_max[parents]
        self._seqs = np.concatenate([self._seqs[parents], tokens_next[:, None]], axis=1)
        self._scores = self._scores[parents]
        return StepOutput(tokens_next, parents, parents)

    def finalize(self) -> list[list[Hypothesis]]:
        """One hypothesis per sentence, in input order (empty for a sentence still running)."""
        return [list(r) for r in self._results]

    def take_finished(self) -> list[tuple[int, list[Hypothesis]]]:
        """(sentence, its hypothesis) of every sentence that finished since the last call."""
        done, self._just_finished = self._just_finished, []
        return [(i, list(self._results[i])) for i in done]

    def drop(self, sentences: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stop searching for ``sentences`` (they get no result); returns which current rows and which current
        sentences stay, as boolean masks (here rows are sentences), to filter the last StepOutput with."""
        keep = ~np.isin(self._rows, np.asarray(sentences, dtype=np.int64))  # (R,)
        self._rows, self._seqs, self._scores = self._rows[keep], self._seqs[keep], self._scores[keep]
        self._row_max = self._row_max[keep]
        return keep, keep


class BeamSearch:
    """Beam search with the GNMT length penalty.

    A sentence ends once ``beam_size`` hypotheses finished (fairseq's rule), or earlier, as soon as its
    ``num_hypotheses`` best finished scores can no longer be beaten: log-probs are <= 0, so an open hypothesis
    with summed score s ends with a normalised score <= s / length_penalty(max_length). Stopping there returns
    exactly what running on would (CTranslate2 stops once the top beam ends, the same rule for alpha = 0).
    """

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
        full_rows: bool = False,
        select_top_k: TopK = top_k,
        no_repeat_ngram_size: int = 0,
    ) -> None:
        self.max_lengths = _check(batch_size, eos_id, max_lengths, min_length, length_penalty)
        self.no_repeat = no_repeat_ngram_size  # see repeat_bans; 0 = off
        self._top_k = select_top_k  # top_k above, or the same on onnxruntime's kernel (transduce.engine.topk)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if not 1 <= num_hypotheses <= beam_size:
            raise ValueError(f"num_hypotheses must be between 1 and beam_size ({beam_size}), got {num_hypotheses}")
        self.beam, self.n_best, self.eos_id = beam_size, num_hypotheses, eos_id
        self.min_length, self.alpha = min_length, length_penalty
        self._alive = np.arange(batch_size, dtype=np.int64)  # (N,) sentences still searching, in row order
        # rows per alive sentence: 1 before the first step, beam_size afterwards; with full_rows beam_size from the
        # start (one live row, the others at -inf), so a running batch always has beam_size rows per sentence
        self._per_sentence = beam_size if full_rows else 1
        first = np.where(np.arange(self._per_sentence) == 0, 0.0, -np.inf)  # (k,) scores of a sentence's rows
        self._seqs = np.zeros((batch_size * self._per_sentence, 0), dtype=np.int64)  # (R, step) generated ids
        self._scores = np.tile(first, batch_size)  # (R,) summed log-probs; -inf for a padding row
        self._finished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        self._n_finished = np.zeros(batch_size, dtype=np.int64)  # (B,)
        self._nth_best = np.full(batch_size, -np.inf)  # (B,) num_hypotheses-th best finished score (-inf: too few)
        self._just_finished: list[int] = []  # sentences finished since the last take_finished()
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
        N, k, beam, eos = len(self._alive), self._per_sentence, self.beam, self.eos_id
        log_probs = _check_log_probs(log_probs, N * k, eos, self.is_done())
        forbidden_eos = eos if self._step < self.min_length else None
        log_probs = _masked(log_probs, repeat_bans(self._seqs, self.no_repeat), forbidden_eos)
        R, V = log_probs.shape
        # Adding a row's own score keeps the order within the row, so each row's top 2*beam tokens suffice.
        c = min(2 * beam, V)
        tok, val = self._top_k(log_probs, c)  # (R, c)
        total = (self._scores[:, None] + val.astype(np.float64)).reshape(N, k * c)  # (N, k*c) candidate scores
        flat = ((np.arange(R) % k)[:, None] * V + tok).reshape(N, k * c)  # (N, k*c) beam_row * V + token
        order = np.lexsort((flat, -total), axis=1)[:, : 2 * beam]  # best first; ties: lower flat index
        flat, total = np.take_along_axis(flat, order, axis=1), np.take_along_axis(total, order, axis=1)
        if flat.shape[1] < beam:  # tiny vocabulary on the first step: pad with impossible candidates
            pad = beam - flat.shape[1]
            flat = np.pad(flat, ((0, 0), (0, pad)))
            total = np.pad(total, ((0, 0), (0, pad)), constant_values=-np.inf)
        first_row = (np.arange(N) * k)[:, None]  # (N, 1) first row of each sentence
        row, tok = flat // V + first_row, flat % V  # (N, C) previous row and token of each candidate
        real = total > -np.inf
        is_eos = tok == eos
        ends = is_eos & real & (np.arange(flat.shape[1]) < beam)  # fairseq: eos counts among the top beam only
        cont = ~is_eos & real
        keep = cont & (np.cumsum(cont, axis=1) <= beam)  # the best beam continuing candidates
        slot = np.argsort(~keep, axis=1, kind="stable")[:, :beam]  # (N, beam) kept candidates first, best first
        live = np.take_along_axis(keep, slot, axis=1)  # (N, beam) False: padding row (score -inf)
        new_row = np.where(live, np.take_along_axis(row, slot, axis=1), first_row)
        new_tok = np.where(live, np.take_along_axis(tok, slot, axis=1), eos)
        new_total = np.where(live, np.take_along_axis(total, slot, axis=1), -np.inf)
        self._step += 1
        at_max = self._step >= self.max_lengths[self._alive]  # (N,)
        lp = float(length_penalty(self._step, self.alpha))
        for i in np.flatnonzero(ends.any(axis=1) | at_max).tolist():
            sent = int(self._alive[i])
            hyps = [
                Hypothesis(self._seqs[row[i, j]].tolist(), float(total[i, j] / lp)) for j in np.flatnonzero(ends[i])
            ]
            if at_max[i]:  # out of length: the open hypotheses end here, as they are
                hyps += [
                    Hypothesis([*self._seqs[new_row[i, j]].tolist(), int(new_tok[i, j])], float(new_total[i, j] / lp))
                    for j in np.flatnonzero(live[i])
                ]
            self._finished[sent].extend(hyps)
            self._n_finished[sent] += len(hyps)
            if len(self._finished[sent]) >= self.n_best:
                self._nth_best[sent] = sorted((h.score for h in self._finished[sent]), reverse=True)[self.n_best - 1]
        # the best normalised score any open hypothesis can still reach (see the class docstring)
        reachable = new_total.max(axis=1) / length_penalty(self.max_lengths[self._alive], self.alpha)  # (N,)
        settled = self._nth_best[self._alive] >= reachable  # (N,) nothing left to gain
        ended = at_max | (self._n_finished[self._alive] >= beam) | ~live.any(axis=1) | settled
        self._just_finished.extend(self._alive[ended].tolist())
        survive = np.flatnonzero(~ended)  # (N',)
        parents = new_row[survive].reshape(-1).astype(np.int64)  # (N'*beam,)
        tokens_next = new_tok[survive].reshape(-1).astype(np.int64)  # (N'*beam,)
        self._seqs = np.concatenate([self._seqs[parents], tokens_next[:, None]], axis=1)
        self._scores = new_total[survive].reshape(-1)
        self._alive = self._alive[survive]
        self._per_sentence = beam
        return StepOutput(tokens_next, parents, survive.astype(np.int64))

    def finalize(self) -> list[list[Hypothesis]]:
        """The ``num_hypotheses`` best finished hypotheses of every sentence, best first (stable on ties)."""
        return [self._best(f) for f in self._finished]

    def _best(self, finished: list[Hypothesis]) -> list[Hypothesis]:
        return sorted(finished, key=lambda h: -h.score)[: self.n_best]

    def take_finished(self) -> list[tuple[int, list[Hypothesis]]]:
        """(sentence, its n-best list) of every sentence that finished since the last call."""
        done, self._just_finished = self._just_finished, []
        return [(i, self._best(self._finished[i])) for i in done]

    def drop(self, sentences: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stop searching for ``sentences`` (they get no result); returns which current rows and which current
        sentences stay, as boolean masks, to filter the last StepOutput with."""
        keep_sentences = ~np.isin(self._alive, np.asarray(sentences, dtype=np.int64))  # (N,)
        keep_rows = np.repeat(keep_sentences, self._per_sentence)  # (R,)
        self._alive = self._alive[keep_sentences]
        self._seqs, self._scores = self._seqs[keep_rows], self._scores[keep_rows]
        return keep_rows, keep_sentences


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
