"""One batch's decode on one engine replica: encode once, then step the decoder until the search is done, finished
rows leaving the batch (``Translator`` runs it on a free replica)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from transduce.engine.cache import unless_identity
from transduce.engine.manifest import Manifest
from transduce.engine.options import DecodeOptions
from transduce.engine.results import EngineStats
from transduce.engine.runner import DecoderRunner
from transduce.engine.search import GreedySearch, Hypothesis, make_search


def decode_on(
    runner: DecoderRunner,
    m: Manifest,
    source: Sequence[Sequence[int]],
    options: DecodeOptions,
    stats: EngineStats,
    on_finished: Callable[[int, list[Hypothesis]], None] | None = None,
    dropped: Callable[[], Collection[int]] | None = None,
) -> list[list[Hypothesis]]:
    """Encode once, then step the decoder until the search is done; finished rows leave the batch.
    ``on_finished(i, hypotheses)`` as each sentence ends, before the others of the batch do; the sentences
    ``dropped()`` names leave between steps, with no hypotheses."""
    S = max(len(s) for s in source)
    ids = np.full((len(source), S), m.pad_id, dtype=np.int64)
    mask = np.zeros((len(source), S), dtype=np.int64)
    for i, seq in enumerate(source):
        ids[i, : len(seq)], mask[i, : len(seq)] = seq, 1
    state = runner.encode(ids, mask)
    shortlist = runner.sessions.shortlist
    # candidate ids of this batch (None: the whole vocabulary); the search then works in candidate positions
    vocab, eos = None, m.eos_id
    if shortlist is not None:
        vocab, masks = shortlist.batch(source)
        state.projection, eos = shortlist.rows(vocab), int(np.searchsorted(vocab, m.eos_id))
        if runner.sessions.shortlist_masks:  # each row normalised over its own sentence's candidates
            state.vocab_mask = masks
    max_lengths = options.max_lengths([len(s) for s in source], m.max_positions - 1)
    search = make_search(len(source), options, eos_id=eos, max_lengths=max_lengths, select_top_k=runner.sessions.top_k)
    tokens = np.full(len(source), m.decoder_start_id, dtype=np.int64)
    steps = 0
    # greedy rows that finish stay in the state, fed eos and unread, until a quarter of it has finished: the
    # caches are then gathered once, not at every step where a sentence ends (greedy b32 1.03-1.08x)
    defer = runner.defers_compaction and isinstance(search, GreedySearch)  # rows only leave, in order
    kept: np.ndarray | None = None  # once a row finished: the state row of each of the search's rows, ascending
    gone: set[int] = set()  # sentences dropped so far
    while not search.is_done():
        log_probs = runner.step(tokens if kept is None else _spread(tokens, kept, state.rows, m.eos_id), state)
        # (R, V or C) -> tokens, parents; the kept rows' log-probs are a copy (small: a quarter of rows at most go)
        out = search.advance(log_probs if kept is None else log_probs[kept])
        steps += 1
        if search.is_done():
            break
        parent_rows, parent_sentences, next_tokens = out.parent_rows, out.parent_sentences, out.tokens
        if dropped is not None and (now_gone := [i for i in dropped() if i not in gone]):
            gone.update(now_gone)
            keep_rows, keep_sentences = search.drop(now_gone)
            parent_rows, next_tokens = parent_rows[keep_rows], next_tokens[keep_rows]
            parent_sentences = parent_sentences[keep_sentences]
            if search.is_done():
                break
        reordered = out.reordered or len(parent_rows) < len(out.parent_rows)
        if on_finished is not None:  # the last step's sentences come back with the batch's result
            for i, hyps in search.take_finished():
                on_finished(i, hyps if vocab is None else _in_vocabulary(hyps, vocab))
        if reordered and defer:  # the gather can wait
            kept = parent_rows if kept is None else kept[parent_rows]
            if (state.rows - len(kept)) * 4 >= state.rows:
                runner.reorder(state, kept, kept)  # greedy: one row per sentence
                kept = None
        elif reordered:
            runner.reorder(
                state,
                unless_identity(parent_rows, len(tokens)),
                unless_identity(parent_sentences, len(state.encoder_mask)),
            )
        tokens = next_tokens if vocab is None else vocab[next_tokens]
    hypotheses = search.finalize()
    if vocab is not None:
        hypotheses = [_in_vocabulary(hyps, vocab) for hyps in hypotheses]
    with stats.lock:
        stats.batches += 1
        stats.sentences += len(source)
        stats.source_tokens += int(mask.sum())
        stats.padded_source_tokens += int(mask.size)
        stats.decoder_steps += steps
        stats.generated_tokens += sum(len(h[0].tokens) + 1 for h in hypotheses if h)
    return hypotheses


def _spread(tokens: np.ndarray, kept: np.ndarray, rows: int, filler: int) -> np.ndarray:
    """(rows,) the next input of every state row: ``tokens`` at the ``kept`` rows, ``filler`` at finished ones."""
    out = np.full(rows, filler, np.int64)
    out[kept] = tokens
    return out


def _in_vocabulary(hyps: list[Hypothesis], vocab: np.ndarray) -> list[Hypothesis]:
    """Hypotheses of a shortlist search (candidate positions) in vocabulary ids."""
    return [Hypothesis(vocab[h.tokens].tolist(), h.score) for h in hyps]
