"""A running batch: the sentences of one beam width decoding together, joining between steps and leaving when done.

The sentences of one set of options form a lane with one search object (greedy or beam, as in ``Translator``),
which newcomers join (``SearchStrategy.join``) with step counts of their own; the lanes' rows lie one after another
in the decoder state, so one decoder step, one search per lane and one cache reorder serve every sentence. A
newcomer's cache is padded at the start to the batch's length and masked (see ``transduce.engine.runner.DecoderState``),
so its output does not depend on its batch-mates.

With a vocabulary shortlist (``transduce.engine.shortlist``) the decoder scores the union of the candidates of the
sentences decoding, kept per cohort (the sentences that joined together) and rebuilt when a cohort joins or its
last sentence leaves; every row is normalised over its own sentence's candidates (the state's vocab_mask). The
searches work in positions of the union, remapped when it is rebuilt (``SearchStrategy.remap``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from transduce.engine.cache import unless_identity
from transduce.engine.manifest import Manifest
from transduce.engine.options import DecodeOptions, sentence_cost
from transduce.engine.runner import DecoderRunner, DecoderState
from transduce.engine.search import Hypothesis, SearchStrategy, make_search
from transduce.engine.shortlist import ProjectionRows


@dataclass(eq=False)
class Job:
    """One sentence to decode: its source ids (tag + pieces + eos), options, and whom to tell when it is done."""

    ids: Sequence[int]
    options: DecodeOptions
    done: Callable[[list[Hypothesis]], None]  # called once with the n-best list when the sentence finishes
    cancelled: Callable[[], bool] = lambda: False  # polled between steps; True drops the sentence
    tag: Any = None  # the caller's own reference

    @property
    def cost(self) -> int:
        """Source tokens x beam width: what it adds to the decoder's work per step."""
        return sentence_cost(len(self.ids), self.options)


@dataclass(eq=False)
class Cohort:
    """Sentences that joined at the same step: with a shortlist, their candidate ids (sorted) stay in the batch's
    union while any of them decodes."""

    vocab: np.ndarray | None
    live: int  # of them, how many still decode


@dataclass(eq=False)
class Lane:
    """The sentences of one set of options, searched by one object; their rows lie together in the state."""

    options: DecodeOptions
    search: SearchStrategy
    rows: int = 0  # current rows in the decoder state
    jobs: dict[int, Job] = field(default_factory=dict)  # by the search's sentence index: those still decoding
    cohorts: dict[int, Cohort] = field(default_factory=dict)  # the same keys: each sentence's cohort


class RunningBatch:
    """The state, lanes and next input tokens of the sentences of one beam width."""

    def __init__(self, runner: DecoderRunner, manifest: Manifest, beam: int) -> None:
        self.runner, self.manifest, self.beam = runner, manifest, beam
        self.state: DecoderState | None = None
        self.lanes: list[Lane] = []
        self.cohorts: list[Cohort] = []  # with a shortlist: those with sentences decoding
        self.tokens = np.zeros(0, np.int64)  # (R,) next input token of every row
        self.shortlist = runner.sessions.shortlist if runner.sessions.shortlist_masks else None
        self.vocab: np.ndarray | None = None  # with a shortlist: the union of the live cohorts' candidates, sorted

    @property
    def sentences(self) -> int:
        """Sentences decoding now."""
        return sum(len(lane.jobs) for lane in self.lanes)

    def live_jobs(self) -> list[Job]:
        """The jobs decoding now."""
        return [job for lane in self.lanes for job in lane.jobs.values()]

    def join(self, jobs: list[Job]) -> tuple[int, int]:
        """Encode ``jobs`` in one encoder pass per distinct options and add them to the lane of their options (each
        job's beam_size is ``self.beam``); returns the source tokens and the padded source positions encoded."""
        m, real, padded = self.manifest, 0, 0
        for options, group in _by_options(jobs).items():
            S = max(len(j.ids) for j in group)
            ids = np.full((len(group), S), m.pad_id, np.int64)
            mask = np.zeros((len(group), S), np.int64)
            for i, job in enumerate(group):
                ids[i, : len(job.ids)], mask[i, : len(job.ids)] = job.ids, 1
            real, padded = real + int(mask.sum()), padded + mask.size
            state = self.runner.encode(ids, mask)
            if self.beam > 1:  # beam_size rows per sentence from the start (BeamSearch full_rows)
                self.runner.reorder(state, np.repeat(np.arange(len(group)), self.beam), None)
            max_lengths = options.max_lengths([len(j.ids) for j in group], m.max_positions - 1)
            vocab, own = (None, None) if self.shortlist is None else self.shortlist.batch([j.ids for j in group])
            at = next((i for i, lane in enumerate(self.lanes) if lane.options == options), len(self.lanes))
            order = self._newcomers_to_lane(at, state.rows)
            masks, projection = self._detach_masks()
            try:  # the running state is left as it was until the newcomers' rows are merged and in place
                merged = state if self.state is None else self.runner.merge(self.state, state)
                if order is not None:  # rows of a lane that others followed: the newcomers go right after them
                    self.runner.reorder(merged, order, order[:: self.beam] // self.beam)  # beam rows per sentence
            except BaseException:  # e.g. out of memory: the joiners fail, the running rows decode on unchanged
                if self.state is not None:
                    self.state.vocab_mask, self.state.projection = masks, projection
                raise
            self.state = merged
            cohort = Cohort(vocab, len(group))
            self.cohorts.append(cohort)
            old = self._rebuild_candidates()
            if at == len(self.lanes):
                eos = m.eos_id if self.vocab is None else int(np.searchsorted(self.vocab, m.eos_id))
                search = make_search(
                    len(group),
                    options,
                    eos_id=eos,
                    max_lengths=max_lengths,
                    full_rows=True,
                    select_top_k=self.runner.sessions.top_k,
                )
                self.lanes.append(Lane(options, search))
                first = 0
            else:
                first = self.lanes[at].search.join(max_lengths)
            lane = self.lanes[at]
            for i, job in enumerate(group):
                lane.jobs[first + i], lane.cohorts[first + i] = job, cohort
            self.tokens = np.concatenate([self.tokens, np.full(state.rows, m.decoder_start_id, np.int64)])
            self._attach_masks(masks, old, None if own is None or vocab is None else (own, vocab))
            if order is not None:
                self.tokens = self.tokens[order]
                if self.state.vocab_mask is not None:  # attached in merge order
                    self.state.vocab_mask = self.state.vocab_mask[order]
            lane.rows += state.rows
        return real, padded

    def _newcomers_to_lane(self, at: int, n: int) -> np.ndarray | None:
        """The row order that moves ``n`` rows appended after the state's to the end of lane ``at``'s rows (None:
        they are in place already, lane ``at`` being the last or new)."""
        if at >= len(self.lanes) - 1:
            return None
        R, end = sum(lane.rows for lane in self.lanes), sum(lane.rows for lane in self.lanes[: at + 1])
        return np.concatenate([np.arange(end), np.arange(R, R + n), np.arange(end, R)])

    def _detach_masks(self) -> tuple[np.ndarray | None, ProjectionRows | None]:
        """Take the running rows' candidate masks (over ``self.vocab``) and projection off the state before a
        merge; returns them (None, None without a shortlist)."""
        if self.state is None or self.shortlist is None:
            return None, None
        taken = self.state.vocab_mask, self.state.projection
        self.state.vocab_mask = self.state.projection = None
        return taken

    def _rebuild_candidates(self) -> np.ndarray | None:
        """With a shortlist: make ``self.vocab`` the union of the live cohorts' candidates and move every lane's
        search to its positions; returns the union before."""
        old = self.vocab
        if self.shortlist is None:
            return old
        self.vocab = np.unique(np.concatenate([c.vocab for c in self.cohorts if c.vocab is not None]))
        # a join only grows the union and a leave only shrinks it: the same size is the same union, nothing moves
        if old is not None and self.lanes and len(old) != len(self.vocab):
            positions, eos = np.searchsorted(self.vocab, old), int(np.searchsorted(self.vocab, self.manifest.eos_id))
            for lane in self.lanes:
                lane.search.remap(positions, eos)
        return old

    def _attach_masks(
        self, masks: np.ndarray | None, old: np.ndarray | None, joined: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        """Give the state the projection rows of ``self.vocab`` and every row's mask over them: the running rows'
        ``masks`` (over the ``old`` candidates) moved to their new columns, then the ``joined`` sentences' own masks
        over their cohort's candidates (beam rows each, at the end)."""
        if self.shortlist is None or self.state is None or self.vocab is None:
            return
        parts = []
        if masks is not None and old is not None:
            parts.append(_in_columns(masks, old, self.vocab))
        if joined is not None:
            own, vocab = joined
            parts.append(np.repeat(_in_columns(own, vocab, self.vocab), self.beam, axis=0))
        self.state.vocab_mask = np.concatenate(parts)
        self.state.projection = self.shortlist.rows(self.vocab)

    def _leave(self, lane: Lane, sentence: int) -> Job:
        """Take a finished or dropped sentence off its lane; its cohort leaves with its last sentence."""
        cohort = lane.cohorts.pop(sentence)
        cohort.live -= 1
        if not cohort.live:
            self.cohorts.remove(cohort)
        return lane.jobs.pop(sentence)

    def step(self) -> int:
        """One decoder step for every row; finished sentences are handed over and leave, cancelled ones are
        dropped; returns how many sentences finished."""
        assert self.state is not None
        log_probs = self.runner.step(self.tokens, self.state)  # (R, V)
        rows, sentences, tokens, finished = [], [], [], 0
        row0 = sent0 = 0
        cohorts = len(self.cohorts)
        for lane in self.lanes:
            mine = log_probs if lane.rows == len(log_probs) else log_probs[row0 : row0 + lane.rows]
            out = lane.search.advance(mine)
            parent_rows, parent_sents, next_tokens = out.parent_rows, out.parent_sentences, out.tokens
            gone = [i for i, job in lane.jobs.items() if job.cancelled()]
            if gone:
                keep_rows, keep_sents = lane.search.drop(gone)
                parent_rows, next_tokens = parent_rows[keep_rows], next_tokens[keep_rows]
                parent_sents = parent_sents[keep_sents]
                for i in gone:
                    self._leave(lane, i)
            for i, hyps in lane.search.take_finished(forget=True):  # dropped ones are not among them
                if self.vocab is not None:  # candidate positions -> vocabulary ids
                    hyps = [Hypothesis(self.vocab[h.tokens].tolist(), h.score) for h in hyps]
                self._leave(lane, i).done(hyps)
                finished += 1
            rows.append(parent_rows + row0)
            sentences.append(parent_sents + sent0)
            tokens.append(next_tokens if self.vocab is None else self.vocab[next_tokens])
            row0, sent0 = row0 + lane.rows, sent0 + lane.rows // self.beam  # beam rows per sentence, always
            lane.rows = len(next_tokens)
        self.lanes = [lane for lane in self.lanes if lane.rows]
        self.tokens = np.concatenate(tokens) if tokens else np.zeros(0, np.int64)
        all_rows, all_sentences = np.concatenate(rows), np.concatenate(sentences)
        self.runner.reorder(self.state, unless_identity(all_rows, row0), unless_identity(all_sentences, sent0))
        self.runner.trim(self.state)
        if not self.lanes:
            self.state, self.vocab, self.cohorts = None, None, []
        elif len(self.cohorts) < cohorts:  # a cohort left: its candidates no longer cost a column
            masks = self._detach_masks()[0]
            self._attach_masks(masks, self._rebuild_candidates())
        return finished

    def fail(self) -> list[Job]:
        """Empty the batch after an error; returns the jobs that were still decoding."""
        jobs = self.live_jobs()
        self.state, self.lanes, self.cohorts = None, [], []
        self.tokens, self.vocab = np.zeros(0, np.int64), None
        return jobs


def _in_columns(masks: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(N, len(target)) bool: ``masks`` over the sorted ids ``source`` moved to the sorted ids ``target``; a source
    column missing from ``target`` must be false on every row (no live sentence has it as a candidate)."""
    out = np.zeros((len(masks), len(target)), bool)
    kept = np.isin(source, target)
    out[:, np.searchsorted(target, source[kept])] = masks[:, kept]
    return out


def _by_options(jobs: list[Job]) -> dict[DecodeOptions, list[Job]]:
    groups: dict[DecodeOptions, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.options, []).append(job)
    return groups
