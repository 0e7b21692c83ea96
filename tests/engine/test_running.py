"""The running batch driven directly, step by step (the scheduler's timing left out): lanes, joins, failures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from transduce.engine.options import DecodeOptions
from transduce.engine.running import Job, RunningBatch
from transduce.engine.search import Hypothesis
from transduce.engine.translator import Translator

EN = ["Hello world.", "The cat sees the dog.", "A big red house.", "Good night, old world!", "The small dog runs."]


@pytest.fixture(params=["plain", "shortlist"])
def translator(request: pytest.FixtureRequest, tiny_translator: Translator) -> Translator:
    if request.param == "plain":
        return tiny_translator
    model: Path = request.getfixturevalue("shortlist_model_dir")
    return Translator(model, device="cpu", intra_threads=1)


def alone(translator: Translator, text: str, options: DecodeOptions) -> list[list[int]]:
    return translator.translate([text], source_lang="en", target_lang="de", options=options)[0].tokens


def job(translator: Translator, text: str, options: DecodeOptions, got: dict[str, list[Hypothesis]]) -> Job:
    ids = translator.tokenizer.encode_source(text, "de")
    return Job(ids, options, lambda hyps: got.__setitem__(text, hyps))


@pytest.mark.parametrize("beam", [1, 3])
def test_newcomers_join_the_lane_of_their_options_ahead_of_later_lanes(translator: Translator, beam: int) -> None:
    """Options A, then B, then A again while the first A sentence decodes: the newcomer joins A's search and its
    rows move up to A's, before B's; every sentence translates as it does alone."""
    a = DecodeOptions(beam_size=beam, min_decoding_length=3)
    b = DecodeOptions(beam_size=beam, no_repeat_ngram_size=2)
    batch = RunningBatch(translator.runner, translator.manifest, beam)
    got: dict[str, list[Hypothesis]] = {}
    batch.join([job(translator, EN[0], a, got)])
    batch.step()
    batch.step()
    batch.join([job(translator, EN[1], b, got)])
    batch.step()
    batch.join([job(translator, EN[2], a, got), job(translator, EN[3], a, got)])
    assert [lane.options for lane in batch.lanes] == [a, b]
    assert [lane.rows for lane in batch.lanes] == [3 * beam, beam]
    while batch.sentences:
        batch.step()
    for text, options in ((EN[0], a), (EN[1], b), (EN[2], a), (EN[3], a)):
        assert [h.tokens for h in got[text]] == alone(translator, text, options), text


def test_a_join_that_fails_after_its_merge_leaves_the_running_sentences_as_they_were(
    translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moving the newcomers' rows up to their lane fails (e.g. out of memory): the join raises, and the sentences
    already decoding go on exactly as before."""
    a, b = DecodeOptions(beam_size=1), DecodeOptions(beam_size=1, no_repeat_ngram_size=2)
    batch = RunningBatch(translator.runner, translator.manifest, 1)
    got: dict[str, list[Hypothesis]] = {}
    batch.join([job(translator, EN[0], a, got)])
    batch.step()
    batch.join([job(translator, EN[1], b, got)])
    batch.step()
    before = (batch.state, batch.tokens.copy(), [(lane.rows, dict(lane.jobs)) for lane in batch.lanes])
    reorder = translator.runner.reorder

    def out_of_memory(*args: object) -> None:
        raise MemoryError("out of memory (simulated)")

    monkeypatch.setattr(translator.runner, "reorder", out_of_memory)
    with pytest.raises(MemoryError, match="simulated"):
        batch.join([job(translator, EN[2], a, got)])
    monkeypatch.setattr(translator.runner, "reorder", reorder)
    assert batch.state is before[0] and np.array_equal(batch.tokens, before[1])
    assert [(lane.rows, dict(lane.jobs)) for lane in batch.lanes] == before[2]
    while batch.sentences:
        batch.step()
    assert sorted(got) == sorted(EN[:2])
    for text, options in ((EN[0], a), (EN[1], b)):
        assert [h.tokens for h in got[text]] == alone(translator, text, options), text


@pytest.mark.parametrize("beam", [1, 3])
def test_a_cancelled_sentence_leaves_its_lane_and_the_later_lanes_decode_on(translator: Translator, beam: int) -> None:
    """Two lanes; a sentence of the first is cancelled mid-decode: it gets no result, the rows after it (its lane's
    and the next lane's) keep their own caches and search state, and translate as they would alone."""
    a = DecodeOptions(beam_size=beam)
    b = DecodeOptions(beam_size=beam, no_repeat_ngram_size=2)
    batch = RunningBatch(translator.runner, translator.manifest, beam)
    got: dict[str, list[Hypothesis]] = {}
    cancelled = False
    doomed = job(translator, EN[4], a, got)
    doomed.cancelled = lambda: cancelled
    batch.join([job(translator, EN[0], a, got), doomed, job(translator, EN[1], a, got)])
    batch.step()
    batch.join([job(translator, EN[2], b, got)])
    batch.step()
    cancelled = True
    batch.step()
    assert [lane.rows for lane in batch.lanes] == [2 * beam, beam] and batch.sentences == 3
    while batch.sentences:
        batch.step()
    assert sorted(got) == sorted([EN[0], EN[1], EN[2]])
    for text, options in ((EN[0], a), (EN[1], a), (EN[2], b)):
        assert [h.tokens for h in got[text]] == alone(translator, text, options), text
