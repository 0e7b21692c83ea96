"""Beam search with the GNMT length penalty (greedy search and what both share: ``transduce.engine.search``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transduce.engine.search import (
    Hypothesis,
    StepOutput,
    TopK,
    _check,
    _check_log_probs,
    _grown,
    _Held,
    _history,
    _masked,
    length_penalty,
    repeat_bans,
    top_k,
)


class BeamSearch(_Held):
    """Beam search with the GNMT length penalty.

    A sentence ends once ``beam_size`` hypotheses finished (fairseq's rule), or earlier, as soon as its
    ``num_hypotheses`` best finished scores can no longer be beaten: log-probs are <= 0, so an open hypothesis
    with summed score s ends with a normalised score <= s / length_penalty(max_length). Stopping there returns
    exactly what running on would (CTranslate2 stops once the top beam ends, the same rule for alpha = 0).

    Every per-sentence array is kept for the sentences still searching only (in row order), so a search that
    sentences keep joining (``join``) and leaving does not grow.
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
        lengths = _check(batch_size, eos_id, max_lengths, min_length, length_penalty)
        self.no_repeat = no_repeat_ngram_size  # see repeat_bans; 0 = off
        self._top_k = select_top_k  # numpy's top_k, or the same on onnxruntime's kernel (transduce.engine.topk)
        if beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {beam_size}")
        if not 1 <= num_hypotheses <= beam_size:
            raise ValueError(f"num_hypotheses must be between 1 and beam_size ({beam_size}), got {num_hypotheses}")
        self.beam, self.n_best, self.eos_id = beam_size, num_hypotheses, eos_id
        self.min_length, self.alpha = min_length, length_penalty
        self._full_rows = full_rows
        # rows per alive sentence: 1 before the first step, beam_size afterwards; with full_rows beam_size from the
        # start (one live row, the others at -inf), so a running batch always has beam_size rows per sentence
        self._per_sentence = beam_size if full_rows else 1
        self._first = np.where(np.arange(self._per_sentence) == 0, 0.0, -np.inf)  # (k,) a new sentence's row scores
        # per sentence still searching (N,): its index, ids generated so far, max length, hypotheses finished and
        # the num_hypotheses-th best finished score (-inf: too few)
        self._alive = np.arange(batch_size, dtype=np.int64)
        self._steps = np.zeros(batch_size, dtype=np.int64)
        self._max = lengths.copy()
        self._n_finished = np.zeros(batch_size, dtype=np.int64)
        self._nth_best = np.full(batch_size, -np.inf)
        self._seqs = np.zeros((batch_size * self._per_sentence, 0), dtype=np.int64)  # (R, T) ids, left-padded -1
        self._scores = np.tile(self._first, batch_size)  # (R,) summed log-probs; -inf for a padding row
        self._hold(batch_size)  # held: each sentence's finished hypotheses so far

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
        bans = repeat_bans(self._seqs, self.no_repeat)
        if self._min_step < self.min_length:  # eos forbidden to the rows of sentences not yet min_length long
            early = np.flatnonzero(np.repeat(self._steps < self.min_length, k))
            if len(early):
                ids = np.full(len(early), eos, np.int64)
                bans = (
                    (early, ids) if bans is None else (np.concatenate([bans[0], early]), np.concatenate([bans[1], ids]))
                )
        log_probs = _masked(log_probs, bans)
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
        steps = self._steps + 1  # (N,) ids generated, this step's included
        at_max = steps >= self._max  # (N,)
        lp = np.asarray(length_penalty(steps, self.alpha))  # (N,)
        for i in np.flatnonzero(ends.any(axis=1) | at_max).tolist():
            sent, before, lp_i = int(self._alive[i]), int(steps[i]) - 1, float(lp[i])
            hyps = [
                Hypothesis(_history(self._seqs, row[i, j], before), float(total[i, j] / lp_i))
                for j in np.flatnonzero(ends[i])
            ]
            if at_max[i]:  # out of length: the open hypotheses end here, as they are
                hyps += [
                    Hypothesis(
                        [*_history(self._seqs, new_row[i, j], before), int(new_tok[i, j])],
                        float(new_total[i, j] / lp_i),
                    )
                    for j in np.flatnonzero(live[i])
                ]
            finished = self._held.setdefault(sent, [])
            finished.extend(hyps)
            self._n_finished[i] += len(hyps)
            if len(finished) >= self.n_best:
                self._nth_best[i] = sorted((h.score for h in finished), reverse=True)[self.n_best - 1]
        # the best normalised score any open hypothesis can still reach (see the class docstring)
        reachable = new_total.max(axis=1) / length_penalty(self._max, self.alpha)  # (N,)
        settled = self._nth_best >= reachable  # (N,) nothing left to gain
        ended = at_max | (self._n_finished >= beam) | ~live.any(axis=1) | settled
        self._just_finished.extend(self._alive[ended].tolist())
        survive = np.flatnonzero(~ended)  # (N',)
        parents = new_row[survive].reshape(-1).astype(np.int64)  # (N'*beam,)
        tokens_next = new_tok[survive].reshape(-1).astype(np.int64)  # (N'*beam,)
        self._alive, self._steps, self._max = self._alive[survive], steps[survive], self._max[survive]
        self._min_step += 1
        self._n_finished, self._nth_best = self._n_finished[survive], self._nth_best[survive]
        longest = int(self._steps.max()) if len(survive) else 0
        self._seqs = _grown(self._seqs[parents], tokens_next, longest)
        self._scores = new_total[survive].reshape(-1)
        self._per_sentence = beam
        return StepOutput(tokens_next, parents, survive.astype(np.int64))

    def finalize(self) -> list[list[Hypothesis]]:
        """The ``num_hypotheses`` best finished hypotheses of every sentence, best first (stable on ties; empty for
        a dropped or forgotten sentence)."""
        return [self._best(self._held.get(i, [])) for i in range(self._count)]

    def _best(self, finished: list[Hypothesis]) -> list[Hypothesis]:
        return sorted(finished, key=lambda h: -h.score)[: self.n_best]

    def take_finished(self, *, forget: bool = False) -> list[tuple[int, list[Hypothesis]]]:
        """(sentence, its n-best list) of every sentence that finished since the last call; ``forget``: the search
        keeps no copy (finalize() will not list them), so a long-running search does not grow."""
        return [(i, self._best(hyps)) for i, hyps in self._taken(forget)]

    def drop(self, sentences: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stop searching for ``sentences`` (they get no result); returns which current rows and which current
        sentences stay, as boolean masks, to filter the last StepOutput with."""
        gone = np.asarray(sentences, dtype=np.int64)
        keep_sentences = ~np.isin(self._alive, gone)  # (N,)
        keep_rows = np.repeat(keep_sentences, self._per_sentence)  # (R,)
        self._forget(sentences)  # alive or finished in the last step
        self._alive, self._steps, self._max = (
            self._alive[keep_sentences],
            self._steps[keep_sentences],
            self._max[keep_sentences],
        )
        self._n_finished, self._nth_best = self._n_finished[keep_sentences], self._nth_best[keep_sentences]
        self._seqs, self._scores = self._seqs[keep_rows], self._scores[keep_rows]
        return keep_rows, keep_sentences

    def join(self, max_lengths: Sequence[int]) -> int:
        """Take on ``len(max_lengths)`` new sentences, beam_size rows each (one live, as with full_rows) after the
        current rows, with no history yet; returns the index of the first (numbered on from the sentences so far).
        Needs ``full_rows``, so that every sentence has beam_size rows at every step."""
        if not self._full_rows:
            raise ValueError("join() needs a BeamSearch made with full_rows=True (beam_size rows per sentence)")
        first, lengths = self._newcomers(max_lengths)
        n = len(lengths)
        self._alive = np.concatenate([self._alive, np.arange(first, first + n, dtype=np.int64)])
        self._steps = np.concatenate([self._steps, np.zeros(n, np.int64)])
        self._max = np.concatenate([self._max, lengths])
        self._n_finished = np.concatenate([self._n_finished, np.zeros(n, np.int64)])
        self._nth_best = np.concatenate([self._nth_best, np.full(n, -np.inf)])
        self._scores = np.concatenate([self._scores, np.tile(self._first, n)])
        self._seqs = np.concatenate([self._seqs, np.full((n * self.beam, self._seqs.shape[1]), -1, np.int64)])
        return first
