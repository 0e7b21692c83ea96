"""The engine as a library user calls it (as people embed CTranslate2): bad input is an error in our words, a call
from inside a callback is an error, not a hang, and a Translator can be closed (found by an audit of the API)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.engine.test_scheduler import running
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_string_or_a_list_of_other_things_is_refused_in_our_words(tiny_translator: Translator) -> None:
    with pytest.raises(TypeError, match=r"texts must be a list of strings, not one str: pass \[text\]"):
        tiny_translator.translate(
            "Hello world.", source_lang="en", target_lang="de"
        )  # (it was translated one character at a time)
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType, not a string"):
        tiny_translator.translate(["Hello.", None], source_lang="en", target_lang="de")  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"texts\[0\] is bytes, not a string"):
        tiny_translator.translate([b"Hello."], source_lang="en", target_lang="de")  # type: ignore[list-item]
    lone = tiny_translator.translate(
        ["Hello \ud800 world."], source_lang="en", target_lang="de"
    )  # (pybind11's "Unable to cast")
    assert len(lone) == 1 and lone[0].hypotheses
    upper = tiny_translator.translate(["Hello world."], source_lang="EN", target_lang="De")  # codes in any case
    assert upper == tiny_translator.translate(["Hello world."], source_lang="en", target_lang="de")


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ([[5, -1, 3]], ValueError, r"source\[0\] holds token id -1, outside the vocabulary \(0 to \d+\)"),
        ([[5, 6, 3], [5, 99_999, 3]], ValueError, r"source\[1\] holds token id 99999, outside the vocabulary"),
        ([[5, 5.5, 3]], TypeError, r"source\[0\] must be a sequence of whole-number token ids"),
        ([5, 6, 3], TypeError, r"source\[0\] must be a sequence of whole-number token ids"),
        ("abc", TypeError, r"source must be a list of token id sequences, not one str"),
        ([["▁Hello", "</s>"]], TypeError, r"source\[0\] must be a sequence of whole-number token ids"),
    ],
)
def test_token_ids_are_checked_against_the_vocabulary(
    tiny_translator: Translator, source: Any, error: type[Exception], message: str
) -> None:
    """A negative id indexed the vocabulary from its end and translated; one past it failed inside onnxruntime."""
    with pytest.raises(error, match=message):
        tiny_translator.translate_batch(source)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"beam_size": 2.5}, "beam_size must be a whole number, got 2.5"),
        ({"beam_size": True}, "beam_size must be a whole number, got True"),
        ({"max_decoding_length": 2.5}, "max_decoding_length must be a whole number"),
        ({"length_penalty": "0.6"}, "length_penalty must be a number, got '0.6'"),
        ({"return_scores": "no"}, "return_scores must be True or False, got 'no'"),
    ],
)
def test_decode_options_check_their_types(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecodeOptions(**options)


def test_decode_options_take_numpy_numbers_as_python_ones() -> None:
    numbers: dict[str, Any] = {
        "beam_size": np.int64(2),
        "num_hypotheses": np.int32(2),
        "length_penalty": np.float32(0.5),
    }
    options = DecodeOptions(**numbers)
    assert type(options.beam_size) is int and type(options.num_hypotheses) is int and options.beam_size == 2


def test_a_call_from_inside_on_result_is_an_error_not_a_hang(tiny_translator: Translator) -> None:
    """on_result runs while the call holds the engine's only replica: a nested translate waited for it for ever."""
    texts = ["Hello.", "This is a much longer sentence that keeps decoding after the short one has ended."]
    errors: list[BaseException] = []

    def nested(i: int, result: Any) -> None:
        try:
            tiny_translator.translate(["Again."], source_lang="en", target_lang="de")
        except RuntimeError as exc:
            errors.append(exc)

    worker = threading.Thread(  # (a daemon: a hang fails the test without holding up the run's exit)
        target=lambda: tiny_translator.translate(texts, source_lang="en", target_lang="de", on_result=nested),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the nested call hung"
    assert errors and "called from inside on_result or dropped" in str(errors[0])
    assert len(tiny_translator.translate(texts, source_lang="en", target_lang="de")) == 2  # the replica was given back


def test_inputs_translated_without_decoding_are_handed_over_and_own_their_lists(tiny_translator: Translator) -> None:
    seen: list[int] = []
    options = DecodeOptions(beam_size=2, num_hypotheses=2, return_scores=True)
    results = tiny_translator.translate(
        ["", "123", "Hello."],
        source_lang="en",
        target_lang="de",
        options=options,
        on_result=lambda i, _: seen.append(i),
    )
    assert sorted(seen) == [0, 1, 2]  # (a streaming caller waited for ever on the blank and the number)
    assert results[0].hypotheses == ["", ""] and results[1].hypotheses == ["123", "123"]
    results[0].scores.append(1.0)
    results[0].tokens[0].append(7)
    assert results[1].scores == [0.0, 0.0] and results[0].tokens[1] == [] and results[1].tokens == [[], []]


@pytest.mark.anyio
async def test_the_step_scheduler_passes_blank_and_letterless_texts_through(tiny_translator: Translator) -> None:
    """submit() decoded them into made-up words ("Insgeblich" for "")."""
    async with running(tiny_translator) as (scheduler, _):
        texts = ["", "   ", "123", "---", "Hello world."]
        got = [t.result.hypotheses[0] for t in await scheduler.submit(texts, source_lang="en", target_lang="de")]
        assert got[:4] == ["", "", "123", "---"]
        assert (
            got[4] == tiny_translator.translate(["Hello world."], source_lang="en", target_lang="de")[0].hypotheses[0]
        )
        assert [
            t.result.hypotheses for t in await scheduler.submit(["", " 1 "], source_lang="en", target_lang="de")
        ] == [[""], ["1"]]
        assert scheduler.queue_depth == 0
        with pytest.raises(TypeError, match="not one str"):
            await scheduler.submit("Hello.", source_lang="en", target_lang="de")


def test_a_closed_translator_says_so(tiny_model_dir: Path) -> None:
    with Translator(tiny_model_dir, device="cpu", intra_threads=1) as translator:
        assert translator.translate(["Hello."], source_lang="en", target_lang="de")[0].hypotheses
    with pytest.raises(RuntimeError, match="this Translator is closed"):
        translator.translate(["Hello."], source_lang="en", target_lang="de")
    translator.close()  # twice is fine


def test_a_call_from_inside_on_result_waits_for_a_replica_another_thread_gives_back(tiny_model_dir: Path) -> None:
    """With two replicas a nested call takes the other one, waiting while another thread holds it: only a thread that
    holds every replica itself is refused (the first version refused whenever none was free at that moment)."""
    translator = Translator(tiny_model_dir, device="cpu", replicas=2, intra_threads=1)
    nested: list[str] = []
    busy = threading.Event()

    def other() -> None:
        busy.set()
        translator.translate(["A sentence for the other thread to decode."] * 8, source_lang="en", target_lang="de")

    def on_result(i: int, result: Any) -> None:
        if not nested:
            worker = threading.Thread(target=other, daemon=True)
            worker.start()
            busy.wait(10)
            nested.extend(translator.translate(["Again."], source_lang="en", target_lang="de")[0].hypotheses)
            worker.join(60)

    translator.translate(["Hello."], source_lang="en", target_lang="de", on_result=on_result)
    assert nested and nested[0] == translator.translate(["Again."], source_lang="en", target_lang="de")[0].hypotheses[0]
