"""engine.cache.reorder gathers axis 0 of every tensor; driven by search StepOutputs it keeps caches aligned."""

from __future__ import annotations

import numpy as np
import pytest

from transduce.engine.beam import BeamSearch
from transduce.engine.cache import reorder
from transduce.engine.search import GreedySearch, SearchStrategy

EOS, V = 0, 7


def test_reorder_gathers_axis_0_of_every_tensor() -> None:
    past = np.arange(4 * 2 * 3 * 5, dtype=np.float32).reshape(4, 2, 3, 5)  # (R, heads, T, d)
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], dtype=np.int64)  # (R, S)
    rows = np.array([2, 2, 0, 3], dtype=np.int64)  # duplicate (beam expansion) and drop (finished row 1)
    out = reorder({"past.0.key": past, "mask": mask}, rows)
    assert set(out) == {"past.0.key", "mask"}
    np.testing.assert_array_equal(out["past.0.key"], past[[2, 2, 0, 3]])
    np.testing.assert_array_equal(out["mask"], mask[[2, 2, 0, 3]])
    assert out["past.0.key"].dtype == np.float32 and out["mask"].dtype == np.int64
    out["past.0.key"][:] = -1  # a gathered copy: the input is untouched
    assert past.min() == 0


def test_reorder_to_no_rows_and_of_nothing() -> None:
    out = reorder({"k": np.ones((3, 2, 4), dtype=np.float16)}, np.zeros(0, dtype=np.int64))
    assert out["k"].shape == (0, 2, 4) and out["k"].dtype == np.float16
    assert reorder({}, np.array([0, 1])) == {}
    with pytest.raises(IndexError):
        reorder({"k": np.ones((2, 3))}, np.array([2]))


def toy_log_probs(sentence: int, prefix: np.ndarray) -> np.ndarray:
    """A deterministic distribution per (sentence, prefix), eos growing likelier with length."""
    rng = np.random.default_rng(hash((sentence, tuple(prefix.tolist()))) % (2**32))
    p = rng.random(V) ** 2
    p[EOS] *= 0.2 * (1 + len(prefix))
    return np.log(p / p.sum()).astype(np.float32)


@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_caches_follow_the_rows_of_a_search(beam_size: int) -> None:
    """A "past" cache gathered by parent_rows and per-sentence tensors gathered by parent_sentences stay aligned."""
    B = 5
    search: SearchStrategy
    if beam_size == 1:
        search = GreedySearch(B, eos_id=EOS, max_lengths=[2, 9, 4, 7, 1])
    else:
        search = BeamSearch(B, beam_size=beam_size, eos_id=EOS, max_lengths=[2, 9, 4, 7, 1], num_hypotheses=2)
    past = {"prefix": np.zeros((B, 0), dtype=np.int64)}  # (R, step) like a self-attention cache
    cross = {"sentence": np.arange(B)[:, None] * np.ones((1, 3), dtype=np.int64)}  # (N, S) like cross K/V
    tokens = np.full(B, -1)  # the start token
    while not search.is_done():
        rows = search.row_sentence
        k = len(rows) // len(cross["sentence"])  # the consecutive rows of one sentence share its cross K/V
        np.testing.assert_array_equal(np.repeat(cross["sentence"][:, 0], k), rows)
        out = search.advance(np.stack([toy_log_probs(int(s), p) for s, p in zip(rows, past["prefix"], strict=True)]))
        past = reorder(past, out.parent_rows)
        past["prefix"] = np.concatenate([past["prefix"], out.tokens[:, None]], axis=1)
        cross = reorder(cross, out.parent_sentences)
        np.testing.assert_array_equal(rows[out.parent_rows], search.row_sentence)  # a row continues its own sentence
        tokens = out.tokens
    assert len(tokens) == 0 and len(past["prefix"]) == 0
    alpha = 0.0 if beam_size == 1 else 0.6
    for i, hyps in enumerate(search.finalize()):
        assert hyps
        for h in hyps:  # the score the search kept matches the prefixes the caller rebuilt through reorder
            max_len = [2, 9, 4, 7, 1][i]
            assert EOS not in h.tokens and len(h.tokens) <= max_len
            steps = [*h.tokens, EOS] if len(h.tokens) < max_len else h.tokens
            raw = sum(float(toy_log_probs(i, np.array(steps[:j]))[t]) for j, t in enumerate(steps))
            assert h.score == pytest.approx(raw / ((5 + len(steps)) / 6) ** alpha, abs=1e-5)


def run(search: SearchStrategy, drop_at: dict[int, list[int]] | None = None) -> dict[int, list[list[int]]]:
    """Drive ``search`` with toy log-probs; at step s drop the sentences ``drop_at[s]``; every result by the step
    take_finished() reported it (each sentence once)."""
    rows = [np.zeros(0, np.int64) for _ in search.row_sentence]  # the prefix of every row
    reported: dict[int, list[list[int]]] = {}
    step = 0
    while not search.is_done():
        sentences = search.row_sentence
        out = search.advance(np.stack([toy_log_probs(int(s), p) for s, p in zip(sentences, rows, strict=True)]))
        tokens, parents = out.tokens, out.parent_rows
        if drop_at and step in drop_at:
            keep_rows, _ = search.drop(drop_at[step])
            tokens, parents = tokens[keep_rows], parents[keep_rows]
        rows = [np.append(rows[p], t) for p, t in zip(parents.tolist(), tokens.tolist(), strict=True)]
        for sentence, hyps in search.take_finished():
            assert sentence not in reported
            reported[sentence] = [h.tokens for h in hyps]
        assert not set(search.row_sentence.tolist()) & set(reported)  # a reported sentence has no rows left
        step += 1
    return reported


@pytest.mark.parametrize("beam_size", [1, 3])
def test_take_finished_reports_each_sentence_once_with_its_final_result(beam_size: int) -> None:
    make = {1: lambda: GreedySearch(4, eos_id=EOS, max_lengths=[3, 8, 5, 8])}.get(
        beam_size, lambda: BeamSearch(4, beam_size=beam_size, eos_id=EOS, max_lengths=[3, 8, 5, 8], num_hypotheses=2)
    )
    search = make()
    reported = run(search)
    assert sorted(reported) == [0, 1, 2, 3]
    assert [reported[i] for i in range(4)] == [[h.tokens for h in hyps] for hyps in search.finalize()]


def test_full_rows_beam_search_gives_the_same_results() -> None:
    """Starting with beam_size rows per sentence (one live, the rest at -inf) changes nothing but the row count."""
    lengths = [3, 8, 5, 8]
    plain = BeamSearch(4, beam_size=3, eos_id=EOS, max_lengths=lengths, num_hypotheses=2)
    full = BeamSearch(4, beam_size=3, eos_id=EOS, max_lengths=lengths, num_hypotheses=2, full_rows=True)
    assert len(full.row_sentence) == 12 and len(plain.row_sentence) == 4
    assert run(full) == run(plain)
    for a, b in zip(full.finalize(), plain.finalize(), strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_dropped_sentences_leave_and_the_others_are_unchanged(beam_size: int) -> None:
    def make() -> SearchStrategy:
        if beam_size == 1:
            return GreedySearch(4, eos_id=EOS, max_lengths=[9, 9, 9, 9])
        return BeamSearch(4, beam_size=beam_size, eos_id=EOS, max_lengths=[9, 9, 9, 9])

    everything = run(make())
    dropped = make()
    partial = run(dropped, drop_at={0: [1], 2: [3]})
    assert 1 not in partial and dropped.finalize()[1] == []
    assert {i: everything[i] for i in partial if i != 3} == {i: partial[i] for i in partial if i != 3}
    assert 0 in partial and 2 in partial
