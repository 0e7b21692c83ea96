"""A running batch: the sentences of one beam width decoding together, joining between steps and leaving when done.

Sentences admitted at the same step form a cohort with its own search object (greedy or beam, as in
``Translator``); the cohorts' rows lie one after another in the decoder state, so one decoder step and one cache
reorder serve all of them. A newcomer's cache is padded at the start to the batch's length and masked (see
``transduce.engine.runner.DecoderState``), so its output does not depend on its batch-mates.

With a vocabulary shortlist (``transduce.engine.shortlist``) the decoder scores the union of the live cohorts'
candidates, rebuilt when a cohort joins or leaves, and every row is normalised over its own sentence's candidates
(the state's vocab_mask). Each cohort's search works in positions of its own candidate array, fixed for its life, so
a rebuilt union only changes which columns of the log-probs the cohort reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from transduce.engine.cache import unless_identity
from transduce.engine.manifest import Manifest
from transduce.engine.options import DecodeOptions
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
        return len(self.ids) * self.options.beam_size


@dataclass(eq=False)
class Cohort:
    """Sentences that joined at the same step, with their search."""

    jobs: list[Job]
    search: SearchStrategy
    rows: int  # current rows in the decoder state
    vocab: np.ndarray | None = None  # with a shortlist: the sorted candidate ids its search's positions index
    columns: np.ndarray | None = None  # where they are in the batch's candidates (None: every column, in order)
    live: list[bool] = field(init=False)  # per job: still decoding

    def __post_init__(self) -> None:
        self.live = [True] * len(self.jobs)

    @property
    def sentences(self) -> int:
        """Sentences still decoding."""
        return sum(self.live)


class RunningBatch:
    """The state, cohorts and next input tokens of the sentences of one beam width."""

    def __init__(self, runner: DecoderRunner, manifest: Manifest, beam: int) -> None:
        self.runner, self.manifest, self.beam = runner, manifest, beam
        self.state: DecoderState | None = None
        self.cohorts: list[Cohort] = []
        self.tokens = np.zeros(0, np.int64)  # (R,) next input token of every row
        self.shortlist = runner.sessions.shortlist if runner.sessions.shortlist_masks else None
        self.vocab: np.ndarray | None = None  # with a shortlist: the union of the live cohorts' candidates, sorted

    @property
    def sentences(self) -> int:
        """Sentences decoding now."""
        return sum(c.sentences for c in self.cohorts)

    def live_jobs(self) -> list[Job]:
        """The jobs decoding now."""
        return [job for c in self.cohorts for job, live in zip(c.jobs, c.live, strict=True) if live]

    def join(self, jobs: list[Job]) -> tuple[int, int]:
        """Encode ``jobs`` in one encoder pass per distinct options and append them to the batch (each job's
        beam_size is ``self.beam``; other options differing make separate cohorts); returns the source tokens and
        the padded source positions encoded."""
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
            eos = m.eos_id if vocab is None else int(np.searchsorted(vocab, m.eos_id))
            search = make_search(
                len(group),
                options,
                eos_id=eos,
                max_lengths=max_lengths,
                full_rows=True,
                select_top_k=self.runner.sessions.top_k,
            )
            masks, projection = self._detach_masks()
            try:
                merged = state if self.state is None else self.runner.merge(self.state, state)
            except BaseException:  # e.g. out of memory: the joiners fail, the running rows decode on unchanged
                if self.state is not None:
                    self.state.vocab_mask, self.state.projection = masks, projection
                raise
            self.state = merged
            self.cohorts.append(Cohort(group, search, state.rows, vocab))
            self.tokens = np.concatenate([self.tokens, np.full(state.rows, m.decoder_start_id, np.int64)])
            self._attach_masks(masks, None if own is None or vocab is None else (own, vocab))
        return real, padded

    def _detach_masks(self) -> tuple[np.ndarray | None, ProjectionRows | None]:
        """Take the running rows' candidate masks (over ``self.vocab``) and projection off the state before a
        merge; returns them (None, None without a shortlist)."""
        if self.state is None or self.shortlist is None:
            return None, None
        taken = self.state.vocab_mask, self.state.projection
        self.state.vocab_mask = self.state.projection = None
        return taken

    def _attach_masks(self, masks: np.ndarray | None, joined: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Rebuild the batch's candidates from its cohorts', and give the state their projection rows and every
        row's mask over them: the running rows' ``masks`` (over the old candidates) moved to their new columns, then
        the ``joined`` sentences' own masks over their cohort's candidates (beam rows each, at the end)."""
        if self.shortlist is None or self.state is None:
            return
        old = self.vocab
        self.vocab = np.unique(np.concatenate([c.vocab for c in self.cohorts if c.vocab is not None]))
        for cohort in self.cohorts:
            assert cohort.vocab is not None
            cohort.columns = np.searchsorted(self.vocab, cohort.vocab)
        parts = []
        if masks is not None and old is not None:
            parts.append(_in_columns(masks, old, self.vocab))
        if joined is not None:
            own, vocab = joined
            parts.append(np.repeat(_in_columns(own, vocab, self.vocab), self.beam, axis=0))
        self.state.vocab_mask = np.concatenate(parts)
        self.state.projection = self.shortlist.rows(self.vocab)

    def step(self) -> int:
        """One decoder step for every row; finished sentences are handed over and leave, cancelled ones are
        dropped; returns how many sentences finished."""
        assert self.state is not None
        log_probs = self.runner.step(self.tokens, self.state)  # (R, V)
        rows, sentences, tokens, finished = [], [], [], 0
        row0 = sent0 = 0
        for cohort in self.cohorts:
            n_sent = cohort.rows // self.beam  # full rows: beam rows per sentence, always
            mine = log_probs[row0 : row0 + cohort.rows]
            out = cohort.search.advance(mine if cohort.columns is None else mine[:, cohort.columns])
            parent_rows, parent_sents, next_tokens = out.parent_rows, out.parent_sentences, out.tokens
            gone = [i for i, job in enumerate(cohort.jobs) if cohort.live[i] and job.cancelled()]
            if gone:
                keep_rows, keep_sents = cohort.search.drop(gone)
                parent_rows, next_tokens = parent_rows[keep_rows], next_tokens[keep_rows]
                parent_sents = parent_sents[keep_sents]
                for i in gone:
                    cohort.live[i] = False
            for i, hyps in cohort.search.take_finished():
                cohort.live[i] = False
                if cohort.vocab is not None:  # candidate positions -> vocabulary ids
                    hyps = [Hypothesis(cohort.vocab[h.tokens].tolist(), h.score) for h in hyps]
                cohort.jobs[i].done(hyps)
                finished += 1
            rows.append(parent_rows + row0)
            sentences.append(parent_sents + sent0)
            tokens.append(next_tokens if cohort.vocab is None else cohort.vocab[next_tokens])
            row0, sent0 = row0 + cohort.rows, sent0 + n_sent
            cohort.rows = len(next_tokens)
        left = len(self.cohorts)
        self.cohorts = [c for c in self.cohorts if c.rows]
        self.tokens = np.concatenate(tokens) if tokens else np.zeros(0, np.int64)
        all_rows, all_sentences = np.concatenate(rows), np.concatenate(sentences)
        self.runner.reorder(self.state, unless_identity(all_rows, row0), unless_identity(all_sentences, sent0))
        self.runner.trim(self.state)
        if not self.cohorts:
            self.state, self.vocab = None, None
        elif len(self.cohorts) < left:  # a cohort left: its candidates no longer cost a column
            self._attach_masks(self._detach_masks()[0])
        return finished

    def fail(self) -> list[Job]:
        """Empty the batch after an error; returns the jobs that were still decoding."""
        jobs = self.live_jobs()
        self.state, self.cohorts, self.tokens, self.vocab = None, [], np.zeros(0, np.int64), None
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
