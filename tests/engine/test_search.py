"""Search strategies driven by hand-made log-probs (no model), as OpenNMT-py tests its beam search."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from transduce.engine.beam import BeamSearch
from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.search import (
    GreedySearch,
    Hypothesis,
    SearchStrategy,
    length_penalty,
    make_search,
    repeat_bans,
    top_k,
)

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


def sentence_model(sentence: int) -> Callable[[int, list[int]], np.ndarray]:
    """The per_sentence distributions of one fixed sentence, whatever index it has in the batch."""
    return lambda _, prefix: per_sentence(sentence, prefix)


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
        out = together.advance(
            np.stack([per_sentence(int(s), p) for s, p in zip(together.row_sentence, prefixes, strict=True)])
        )
        prefixes = [prefixes[r] + [int(t)] for r, t in zip(out.parent_rows, out.tokens, strict=True)]
    assert rows_seen[-1] < max(rows_seen)  # finished sentences left the active rows
    for i in range(5):
        alone = make(1)
        drive(alone, sentence_model(i))
        assert alone.finalize()[0] == together.finalize()[i]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_sentences_joining_mid_search_and_remapped_columns_search_as_alone(beam_size: int) -> None:
    """Sentences join a running search after 2 and 4 steps (each with its own step count for min length, max
    length, length penalty and repeat bans), and at step 5 the columns change meaning (a rebuilt shortlist union):
    every sentence gets the hypotheses and scores it gets searched alone."""
    lengths = {0: 9, 1: 3, 2: 12, 3: 6, 4: 10}
    options = DecodeOptions(
        beam_size=beam_size,
        num_hypotheses=min(2, beam_size),
        min_decoding_length=2,
        length_penalty=0.6,
        no_repeat_ngram_size=2,
    )

    def make(sentences: list[int], eos: int = EOS) -> SearchStrategy:
        return make_search(
            len(sentences), options, eos_id=eos, max_lengths=[lengths[i] for i in sentences], full_rows=True
        )

    together = make([0, 1])
    ids = [0, 1]  # the search's sentence index -> our sentence
    width, pos = V, np.arange(V)  # log-prob columns and where each vocabulary id is among them
    prefixes: list[list[int]] = [[] for _ in together.row_sentence]  # per row, in vocabulary ids
    got: dict[int, list[Hypothesis]] = {}
    for step in range(60):
        if step == 2:
            assert together.join([lengths[2], lengths[3]]) == 2
            ids += [2, 3]
        if step == 4:
            assert together.join([lengths[4]]) == 4
            ids += [4]
        if step in (2, 4):
            prefixes += [[] for _ in range(len(together.row_sentence) - len(prefixes))]
        if step == 5:  # two more columns, every id moved
            new_pos = np.array([3, 0, 7, 1, 5, 2])
            moved = np.zeros(width, np.int64)  # old column -> new column
            moved[pos] = new_pos
            together.remap(moved, int(new_pos[EOS]))
            width, pos = V + 2, new_pos
        if together.is_done():
            break
        rows = np.full((len(prefixes), width), -np.inf, np.float32)
        for r, (s, prefix) in enumerate(zip(together.row_sentence, prefixes, strict=True)):
            rows[r, pos] = per_sentence(ids[int(s)], prefix)
        out = together.advance(rows)
        to_id = np.full(width, -1)  # column -> vocabulary id (columns no id has are never chosen)
        to_id[pos] = np.arange(V)
        prefixes = [prefixes[r] + [int(to_id[t])] for r, t in zip(out.parent_rows, out.tokens, strict=True)]
        for i, hyps in together.take_finished(forget=True):
            got[ids[i]] = [Hypothesis(to_id[h.tokens].tolist(), h.score) for h in hyps]
    assert together.is_done() and sorted(got) == [0, 1, 2, 3, 4]
    assert together.finalize() == [[]] * 5  # forgotten as they were taken
    for sentence, hyps in got.items():
        alone = make([sentence])
        drive(alone, sentence_model(sentence))
        assert alone.finalize()[0] == hyps, sentence


def test_only_a_full_rows_beam_search_takes_newcomers() -> None:
    with pytest.raises(ValueError, match="full_rows"):
        BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[5]).join([5])
    with pytest.raises(ValueError, match=">= 1"):
        GreedySearch(1, eos_id=EOS, max_lengths=[5]).join([0])


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


# ---- top_k: the hot-path selection must equal a stable full sort, ties to the lower id ----


@pytest.mark.parametrize(("V", "k"), [(6, 4), (2000, 8), (2003, 8), (32000, 8), (777, 1)])
def test_top_k_equals_stable_sort_with_ties_and_masked_entries(V: int, k: int) -> None:
    rng = np.random.default_rng(V + k)
    x = rng.integers(-40, 0, size=(7, V)).astype(np.float32) / 4  # many exact ties
    x[1] = -1.0  # a whole row of ties
    x[2, :] = -np.inf
    x[2, [5, 3]] = -2.0  # fewer than k real entries
    x[3, V - 1] = 0.5  # the best entry in the tail columns outside the blocks
    x[4, ::3] = -np.inf
    ids, vals = top_k(x, k)
    ref = np.argsort(-x, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(ids, ref)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, ref, axis=1))
    assert ids.dtype == np.int64 and vals.dtype == np.float32
    half = (x / 3).astype(np.float16)  # float16 rows (an fp16 decoder) rank exactly like the float16 values
    np.testing.assert_array_equal(top_k(half, k)[0], np.argsort(-half, axis=1, kind="stable")[:, :k])
    with pytest.raises(ValueError, match="k must be"):
        top_k(x, V + 1)


# ---- greedy ----


def test_greedy_ties_go_to_the_lower_id_and_scores_use_the_length_penalty() -> None:
    search = GreedySearch(1, eos_id=EOS, max_lengths=[10], length_penalty=0.6)
    steps = iter([lp(0.1, 0.3, 0.3, 0.3), lp(0.8, 0.2)])
    drive(search, lambda s, p: next(steps))
    (hyp,) = search.finalize()[0]
    assert hyp.tokens == [1]
    raw = float(np.log(0.3) + np.log(0.8))
    assert hyp.score == pytest.approx(raw / ((5 + 2) / 6) ** 0.6, abs=1e-5)  # L = 2 counts the eos


def test_greedy_max_length_scores_with_the_generated_length() -> None:
    search = GreedySearch(1, eos_id=EOS, max_lengths=[3], length_penalty=1.0)
    drive(search, lambda s, p: lp(0.1, 0.9))
    (hyp,) = search.finalize()[0]
    assert hyp.tokens == [1, 1, 1]
    assert hyp.score == pytest.approx(3 * float(lp(0.1, 0.9)[1]) / ((5 + 3) / 6), abs=1e-5)


def test_greedy_finished_rows_leave_with_parent_rows() -> None:
    search = GreedySearch(3, eos_id=EOS, max_lengths=[10, 10, 10])
    np.testing.assert_array_equal(search.row_sentence, [0, 1, 2])
    out = search.advance(np.stack([lp(0.1, 0.9), lp(0.1, 0.9), lp(0.1, 0.9)]))
    assert out.tokens.tolist() == [1, 1, 1] and out.parent_rows.tolist() == [0, 1, 2]
    out = search.advance(np.stack([lp(0.1, 0.9), lp(0.9, 0.1), lp(0.1, 0.1, 0.8)]))  # sentence 1 ends
    assert (
        out.parent_sentences.tolist() == [0, 2] and out.parent_rows.tolist() == [0, 2] and out.tokens.tolist() == [1, 2]
    )
    assert out.tokens.dtype == np.int64 and out.parent_rows.dtype == np.int64
    np.testing.assert_array_equal(search.row_sentence, [0, 2])
    assert search.finalize()[1][0].tokens == [1] and search.finalize()[0] == []  # sentence 0 still running
    out = search.advance(np.stack([lp(0.9, 0.1), lp(0.9, 0.1)]))
    assert search.is_done() and len(out.tokens) == 0
    assert [h[0].tokens for h in search.finalize()] == [[1, 1], [1], [1, 2]]


def test_min_length_does_not_touch_the_callers_array() -> None:
    rows = np.stack([lp(0.9, 0.1), lp(0.2, 0.8)])
    before = rows.copy()
    for search in (
        GreedySearch(2, eos_id=EOS, max_lengths=[5, 5], min_length=1),
        BeamSearch(2, beam_size=2, eos_id=EOS, max_lengths=[5, 5], min_length=1),
    ):
        out = search.advance(rows)
        assert EOS not in out.tokens.tolist()
        np.testing.assert_array_equal(rows, before)


# ---- beam ----


def test_beam_rows_expand_then_finished_sentences_leave() -> None:
    search = BeamSearch(2, beam_size=2, eos_id=EOS, max_lengths=[10, 10], length_penalty=0.0)
    out = search.advance(np.stack([lp(0.0, 0.5, 0.3, 0.2), lp(0.0, 0.1, 0.2, 0.7)]))
    assert out.parent_sentences.tolist() == [0, 1]  # both sentences go on, now with beam_size rows each
    assert out.parent_rows.tolist() == [0, 0, 1, 1] and out.tokens.tolist() == [1, 2, 3, 2]
    np.testing.assert_array_equal(search.row_sentence, [0, 0, 1, 1])
    # No sentence ends: rows only move within their sentence (sentence 0's second beam takes both places).
    flat = lp(0.0, 0.2, 0.2, 0.2, 0.2, 0.2)
    out = search.advance(np.stack([flat, lp(0.0, 0.0, 0.0, 0.0, 0.5, 0.5), flat, lp(0.0, 0.0, 0.0, 0.0, 0.0, 1.0)]))
    assert out.parent_sentences.tolist() == [0, 1]
    assert out.parent_rows.tolist() == [1, 1, 3, 2] and out.tokens.tolist() == [4, 5, 5, 1]
    # Sentence 0 gets two sure eos endings (a tie: the lower row wins) and leaves; sentence 1 goes on.
    out = search.advance(np.stack([lp(1.0), lp(1.0), lp(0.0, 0.5, 0.5), lp(0.0, 0.5, 0.5)]))
    assert out.parent_sentences.tolist() == [1] and out.parent_rows.tolist() == [2, 2] and out.tokens.tolist() == [1, 2]
    np.testing.assert_array_equal(search.row_sentence, [1, 1])
    assert [h.tokens for h in search.finalize()[0]] == [[2, 4]]
    assert search.finalize()[1] == []


def test_beam_hypotheses_exclude_eos_and_are_normalised() -> None:
    search = BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[5], num_hypotheses=2, length_penalty=0.6)
    steps = iter([lp(0.0, 0.6, 0.4), lp(0.7, 0.3), lp(0.8, 0.2)])
    drive(search, lambda s, p: next(steps))
    best, second = search.finalize()[0]
    assert best.tokens == [1] and second.tokens == [2]
    assert best.score == pytest.approx(float(lp(0.0, 0.6, 0.4)[1] + lp(0.7, 0.3)[0]) / (7 / 6) ** 0.6, abs=1e-5)


def test_beam_ties_go_to_the_lower_id() -> None:
    search = BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[1], num_hypotheses=2, length_penalty=0.0)
    drive(search, lambda s, p: lp(0.1, 0.1, 0.2, 0.2, 0.2, 0.2))
    assert [h.tokens for h in search.finalize()[0]] == [[2], [3]]


def test_beam_size_one_is_greedy() -> None:
    for i in range(6):
        greedy = GreedySearch(1, eos_id=EOS, max_lengths=[12], length_penalty=0.6)
        beam = BeamSearch(1, beam_size=1, eos_id=EOS, max_lengths=[12], length_penalty=0.6)
        drive(greedy, sentence_model(i))
        drive(beam, sentence_model(i))
        (g,), (b,) = greedy.finalize()[0], beam.finalize()[0]
        assert g.tokens == b.tokens and g.score == pytest.approx(b.score, abs=1e-9)


def test_wide_beam_is_exhaustive_over_a_tiny_vocabulary() -> None:
    """Beam wider than every possible hypothesis (some rows are padding) ranks all of them exactly."""
    V3, max_len, alpha = 3, 3, 0.6

    def model(sentence: int, prefix: list[int]) -> np.ndarray:
        rng = np.random.default_rng(len(prefix) * 7 + sum(prefix) * 13 + len([t for t in prefix if t == 2]))
        p = rng.random(V3) + 0.05
        return np.log(p / p.sum()).astype(np.float32)

    expected: list[tuple[float, list[int]]] = []

    def walk(prefix: list[int], score: float) -> None:
        row = model(0, prefix).astype(np.float64)
        expected.append(((score + row[EOS]) / ((5 + len(prefix) + 1) / 6) ** alpha, prefix))
        for t in (1, 2):
            if len(prefix) + 1 == max_len:
                expected.append(((score + row[t]) / ((5 + max_len) / 6) ** alpha, [*prefix, t]))
            else:
                walk([*prefix, t], score + row[t])

    walk([], 0.0)
    assert len(expected) == 15
    search = BeamSearch(1, beam_size=16, eos_id=EOS, max_lengths=[max_len], num_hypotheses=15, length_penalty=alpha)
    drive(search, model)
    got = search.finalize()[0]
    expected.sort(key=lambda e: -e[0])
    assert [h.tokens for h in got] == [e[1] for e in expected]
    np.testing.assert_allclose([h.score for h in got], [e[0] for e in expected], rtol=1e-6)


def test_beam_independence_with_mixed_lengths_and_min_length() -> None:
    lengths = [3, 9, 1, 6]

    def run(sentences: list[int]) -> list[list[Hypothesis]]:
        search = BeamSearch(
            len(sentences),
            beam_size=4,
            eos_id=EOS,
            max_lengths=[lengths[s] for s in sentences],
            num_hypotheses=3,
            min_length=1,
        )
        drive(search, lambda s, p: per_sentence(sentences[s], p))
        return search.finalize()

    together = run([0, 1, 2, 3])
    for i in range(4):
        assert run([i]) == [together[i]]
        assert all(1 <= len(h.tokens) <= lengths[i] for h in together[i])
    assert run([3, 1]) == [together[3], together[1]]


def test_protocol_and_more_bad_arguments() -> None:
    greedy = GreedySearch(1, eos_id=EOS, max_lengths=[2])
    assert isinstance(greedy, SearchStrategy)
    assert isinstance(BeamSearch(1, beam_size=2, eos_id=EOS, max_lengths=[2]), SearchStrategy)
    empty = GreedySearch(0, eos_id=EOS, max_lengths=[])
    assert empty.is_done() and empty.finalize() == [] and len(empty.row_sentence) == 0
    with pytest.raises(ValueError, match="shape"):
        greedy.advance(np.zeros((2, V), dtype=np.float32))
    with pytest.raises(ValueError, match="eos_id 9"):
        GreedySearch(1, eos_id=9, max_lengths=[2]).advance(np.zeros((1, V), dtype=np.float32))
    with pytest.raises(ValueError, match="is_done"):
        empty.advance(np.zeros((0, V), dtype=np.float32))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"batch_size": -1, "max_lengths": []}, "batch_size"),
        ({"eos_id": -1}, "eos_id"),
        ({"min_length": -2}, "min_length"),
        ({"length_penalty": -0.5}, "length_penalty"),
    ]
    for kwargs, message in cases:
        args: dict[str, Any] = {"batch_size": 1, "eos_id": EOS, "max_lengths": [3], **kwargs}
        with pytest.raises(ValueError, match=message):
            GreedySearch(**args)
        with pytest.raises(ValueError, match=message):
            BeamSearch(beam_size=2, **args)


def reference_beam(
    model: Callable[[list[int]], np.ndarray], beam: int, max_len: int, n_best: int, alpha: float
) -> tuple[list[Hypothesis], int]:
    """A plain one-sentence beam search with fairseq's stopping rule only (beam_size finished); (n-best, steps)."""
    beams: list[tuple[float, list[int]]] = [(0.0, [])]
    finished: list[Hypothesis] = []
    step = 0
    while True:
        step += 1
        cands = []
        for b, (score, prefix) in enumerate(beams):
            row = model(prefix).astype(np.float64)
            cands += [(score + float(row[t]), b * V + t, prefix, t) for t in range(V)]
        cands.sort(key=lambda c: (-c[0], c[1]))
        lp_now = ((5.0 + step) / 6.0) ** alpha
        finished += [Hypothesis(p, s / lp_now) for s, _, p, t in cands[:beam] if t == EOS]
        beams = [(s, [*p, t]) for s, _, p, t in cands[: 2 * beam] if t != EOS][:beam]
        if step >= max_len:
            finished += [Hypothesis(p, s / lp_now) for s, p in beams]
        if step >= max_len or len(finished) >= beam:
            return sorted(finished, key=lambda h: -h.score)[:n_best], step


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("n_best", [1, 2])
def test_beam_stops_early_only_when_nothing_can_change(alpha: float, n_best: int) -> None:
    """Early stopping returns exactly what running on to beam_size finished hypotheses returns, in fewer steps."""

    def model_for(sentence: int) -> Callable[[list[int]], np.ndarray]:
        def model(prefix: list[int]) -> np.ndarray:
            rng = np.random.default_rng([sentence, len(prefix), *prefix])
            p = rng.random(V) ** 3 + 0.01
            p[EOS] *= 1 + len(prefix)  # endings get likelier as hypotheses grow
            return np.log(p / p.sum()).astype(np.float32)

        return model

    sentences, beam, max_len = range(40), 4, 12
    search = BeamSearch(
        len(sentences),
        beam_size=beam,
        eos_id=EOS,
        max_lengths=[max_len] * len(sentences),
        num_hypotheses=n_best,
        length_penalty=alpha,
    )
    steps = np.zeros(len(sentences), dtype=np.int64)
    prefixes: list[list[int]] = [[] for _ in sentences]
    while not search.is_done():
        rows = search.row_sentence
        steps[np.unique(rows)] += 1
        out = search.advance(np.stack([model_for(int(s))(p) for s, p in zip(rows, prefixes, strict=True)]))
        prefixes = [prefixes[r] + [int(t)] for r, t in zip(out.parent_rows, out.tokens, strict=True)]
    got = search.finalize()
    saved = 0
    for s in sentences:
        expected, ref_steps = reference_beam(model_for(s), beam, max_len, n_best, alpha)
        assert [h.tokens for h in got[s]] == [h.tokens for h in expected]
        np.testing.assert_allclose([h.score for h in got[s]], [h.score for h in expected], rtol=1e-6)
        assert steps[s] <= ref_steps
        saved += ref_steps - int(steps[s])
    assert saved > 0  # the bound lets some sentences stop before beam_size hypotheses finished


def test_greedy_reports_whether_rows_moved() -> None:
    search = GreedySearch(3, eos_id=EOS, max_lengths=[10, 10, 10])
    keep_going = np.stack([lp(0.1, 0.2, 0.7)] * 3)  # no row picks eos
    out = search.advance(keep_going)
    assert not out.reordered and out.parent_rows.tolist() == [0, 1, 2] and out.tokens.tolist() == [2, 2, 2]
    one_ends = np.stack([lp(0.1, 0.2, 0.7), lp(*([0.0] * EOS), 0.9), lp(0.1, 0.2, 0.7)])  # row 1 picks eos
    out = search.advance(one_ends)
    assert out.reordered and out.parent_rows.tolist() == [0, 2]
    assert search.finalize()[1][0].tokens == [2]


# ---- no_repeat_ngram_size: a hypothesis never repeats an n-gram ----


def test_repeat_bans_equal_a_brute_force_search() -> None:
    rng = np.random.default_rng(5)
    for _ in range(2000):
        R, T, n = int(rng.integers(1, 6)), int(rng.integers(0, 25)), int(rng.integers(2, 6))
        seqs = rng.integers(0, 3, (R, T))  # three ids: many repeats
        bans = repeat_bans(seqs, n)
        found = set() if bans is None else set(zip(bans[0].tolist(), bans[1].tolist(), strict=True))
        expected = {
            (r, int(seqs[r, j + n - 1]))
            for r in range(R)
            for j in range(T - n + 1)
            if seqs[r, j : j + n - 1].tolist() == seqs[r, T - n + 1 :].tolist()
        }
        assert found == expected, (seqs, n)
    assert repeat_bans(np.ones((2, 9), np.int64), 0) is None  # off


def looping(sentence: int, prefix: list[int]) -> np.ndarray:
    """A model stuck on 1 2 1 2 ..., with 3 and 4 its next choices and eos after 12 tokens."""
    if len(prefix) >= 12:
        return lp(0.9, 0.02, 0.02, 0.02, 0.02)
    return lp(0.001, 0.5, 0.3, 0.1, 0.05) if len(prefix) % 2 == 0 else lp(0.001, 0.3, 0.5, 0.1, 0.05)


def ngrams(tokens: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_greedy_and_beam_never_repeat_an_ngram(n: int) -> None:
    for beam in (1, 3):
        outputs = []
        for size in (0, n):
            options = DecodeOptions(beam_size=beam, num_hypotheses=beam, length_penalty=0.0, no_repeat_ngram_size=size)
            search = make_search(2, options, eos_id=EOS, max_lengths=[20, 20])
            drive(search, looping)
            outputs.append([h.tokens for hyps in search.finalize() for h in hyps])
        looped, guarded = outputs
        assert any(len(set(ngrams(t, n))) < len(ngrams(t, n)) for t in looped)  # the loop is there without it
        for tokens in guarded:
            assert tokens and len(set(ngrams(tokens, n))) == len(ngrams(tokens, n)), (beam, n, tokens)


def test_no_repeat_ngram_size_is_validated_and_off_by_default() -> None:
    assert DecodeOptions().no_repeat_ngram_size == 0 and SERVED_NO_REPEAT_NGRAM_SIZE >= 2
    for bad in (1, -1):
        with pytest.raises(ValueError, match="no_repeat_ngram_size must be 0"):
            DecodeOptions(no_repeat_ngram_size=bad)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_sentence_dropped_in_the_step_it_finished_gets_no_result(beam_size: int) -> None:
    search = make_search(
        2, DecodeOptions(beam_size=beam_size), eos_id=EOS, max_lengths=[1, 5], full_rows=True
    )  # sentence 0 ends at its first step (its max length)
    rows = len(search.row_sentence)
    out = search.advance(np.log(np.full((rows, V), 1.0 / V, np.float32)))
    keep_rows, _ = search.drop([0])  # its request was cancelled while that step ran
    assert len(out.tokens[keep_rows]) == len(search.row_sentence)
    assert search.take_finished() == [] and search.finalize()[0] == []
