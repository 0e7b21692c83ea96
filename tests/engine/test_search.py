"""Search strategies driven by hand-made log-probs (no model), as OpenNMT-py tests its beam search."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from engine.search import BeamSearch, GreedySearch, Hypothesis, SearchStrategy, length_penalty

EOS, V = 0, 6
NEG = -1e9


def lp(*probs: float) -> np.ndarray:
    """A log-prob row from probabilities over the V tokens (missing ones get ~0)."""
    p = np.full(V, 1e-9)
    probs = tuple(max(x, 1e-12) for x in probs)
    p[: len(probs)] = probs
    return np.log(p / p.sum()).astype(np.float32)


def drive(search: SearchStrategy, model: Callable[[int, list[int]], np.ndarray], max_steps: int = 50) -> None:
    """Feed each row the log-probs ``model(sentence, prefix)``; prefixes are rebuilt from parent_rows/tokens."""
    prefixes: list[list[int]] = [[] for _ in search.row_sentence]
    for _ in range(max_steps):
        if search.is_done():
            return
        rows = search.row_sentence
        out = search.advance(np.stack([model(int(s), p) for s, p in zip(rows, prefixes, strict=True)]))
        prefixes = [prefixes[r] + [int(t)] for r, t in zip(out.parent_rows, out.tokens, strict=True)]
    raise AssertionError("search did not finish")


def test_greedy_picks_argmax_and_stops_at_eos() -> None:
    search = GreedySearch(1, eos_id=EOS, max_lengths=[10])
    steps = iter([lp(0.1, 0.2, 0.7), lp(0.1, 0.1, 0.1, 0.7), lp(0.9, 0.1)])
    drive(search, lambda s, p: next(steps))
    (hyp,) = search.finalize()[0]
    assert hyp.tokens == [2, 3]
    assert hyp.score == pytest.approx(float(np.log(0.7) + np.log(0.7) + np.log(0.9)), abs=1e-4)


def test_min_and_max_length() -> None:
    eos_first = lambda s, p: lp(0.9, 0.1)  # noqa: E731 - eos is always the most likely
    search = GreedySearch(1, eos_id=EOS, max_lengths=[10], min_length=2)
    drive(search, eos_first)
    assert search.finalize()[0][0].tokens == [1, 1]
    capped = GreedySearch(1, eos_id=EOS, max_lengths=[3])
    drive(capped, lambda s, p: lp(0.1, 0.9))
    assert capped.finalize()[0][0].tokens == [1, 1, 1]
    beam = BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[4], length_penalty=0.0)
    drive(beam, lambda s, p: lp(0.01, 0.6, 0.39))
    assert all(len(h.tokens) == 4 for h in beam.finalize()[0])


def garden_path(sentence: int, prefix: list[int]) -> np.ndarray:
    """Token 1 looks best first, but after it everything is unlikely; token 2 leads to a sure ending."""
    if not prefix:
        return lp(0.0, 0.55, 0.45)
    if prefix == [1]:
        return lp(0.2, 0.0, 0.0, 0.27, 0.27, 0.26)
    return lp(0.99, 0.01)


def test_beam_finds_what_greedy_misses() -> None:
    greedy = GreedySearch(1, eos_id=EOS, max_lengths=[5])
    drive(greedy, garden_path)
    beam = BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[5], length_penalty=0.0)
    drive(beam, garden_path)
    assert greedy.finalize()[0][0].tokens[0] == 1
    assert beam.finalize()[0][0].tokens == [2]
    assert beam.finalize()[0][0].score > greedy.finalize()[0][0].score


def short_or_long(sentence: int, prefix: list[int]) -> np.ndarray:
    """Ending at once scores ln 0.5; going on to four tokens scores a bit less raw, more once length-normalised."""
    if not prefix:
        return lp(0.5, 0.5)
    if len(prefix) < 4:
        return lp(0.02, 0.9, 0.08)  # eos ranks below the beam here, so it never finishes a hypothesis early
    return lp(0.999, 0.001)


def test_length_penalty_changes_the_winner() -> None:
    raw = BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[8], length_penalty=0.0)
    drive(raw, short_or_long)
    normalised = BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[8], length_penalty=2.0)
    drive(normalised, short_or_long)
    assert raw.finalize()[0][0].tokens == []
    assert normalised.finalize()[0][0].tokens == [1, 1, 1, 1]
    assert length_penalty(1, 0.6) == pytest.approx((6 / 6) ** 0.6)


def test_n_best_is_sorted_and_distinct() -> None:
    search = BeamSearch(1, beam_size=4, eos_id=EOS, max_lengths=[6], num_hypotheses=3, length_penalty=0.6)
    drive(search, lambda s, p: lp(0.3, 0.3, 0.2, 0.2) if len(p) < 2 else lp(0.9, 0.1))
    hyps = search.finalize()[0]
    assert len(hyps) == 3 and [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert len({tuple(h.tokens) for h in hyps}) == 3


def per_sentence(sentence: int, prefix: list[int]) -> np.ndarray:
    """A different deterministic distribution for every sentence and prefix."""
    rng = np.random.default_rng(hash((sentence, tuple(prefix))) % (2**32))
    probs = rng.random(V) ** 3
    probs[EOS] *= 0.3 + 0.25 * len(prefix)
    return np.log(probs / probs.sum()).astype(np.float32)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_sentences_are_independent_and_finished_rows_leave(beam_size: int) -> None:
    def make(n: int) -> SearchStrategy:
        if beam_size == 1:
            return GreedySearch(n, eos_id=EOS, max_lengths=[12] * n)
        return BeamSearch(n, beam_size=beam_size, eos_id=EOS, max_lengths=[12] * n)

    together = make(5)
    rows_seen: list[int] = []
    prefixes: list[list[int]] = [[] for _ in range(5)]
    while not together.is_done():
        rows_seen.append(len(together.row_sentence))
        out = together.advance(np.stack([per_sentence(int(s), p) for s, p in
                                         zip(together.row_sentence, prefixes, strict=True)]))
        prefixes = [prefixes[r] + [int(t)] for r, t in zip(out.parent_rows, out.tokens, strict=True)]
    assert rows_seen[-1] < max(rows_seen)  # finished sentences left the active rows
    for i in range(5):
        alone = make(1)
        drive(alone, lambda s, p, i=i: per_sentence(i, p))
        assert alone.finalize()[0] == together.finalize()[i]


def test_empty_batch_and_bad_arguments() -> None:
    empty = BeamSearch(0, beam_size=2, eos_id=EOS, max_lengths=[])
    assert empty.is_done() and empty.finalize() == []
    with pytest.raises(ValueError, match="num_hypotheses"):
        BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[5], num_hypotheses=3)
    with pytest.raises(ValueError, match="beam_size"):
        BeamSearch(1, beam_size=0, eos_id=EOS, max_lengths=[5])
    with pytest.raises(ValueError, match="one entry per sentence"):
        GreedySearch(2, eos_id=EOS, max_lengths=[5])
    with pytest.raises(ValueError, match=">= 1"):
        GreedySearch(1, eos_id=EOS, max_lengths=[0])
    assert Hypothesis([1], -1.0) == Hypothesis([1], -1.0)
