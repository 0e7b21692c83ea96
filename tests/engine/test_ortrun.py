"""engine.ortrun.unchecked_run: the same outputs as InferenceSession.run, errors still raised, a fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from transduce.engine import io_names as names
from transduce.engine.ortrun import unchecked_run
from transduce.engine.translator import Translator


def test_unchecked_run_gives_what_run_gives_and_still_refuses_a_missing_input(tiny_translator: Translator) -> None:
    sessions = tiny_translator.runner.sessions
    ids = np.array([[5, 6, 7, 2]], np.int64)
    feed = {names.ENC_INPUT_IDS: ids, names.ENC_ATTENTION_MASK: np.ones_like(ids)}
    expected = sessions.encoder.run(sessions.cross_names, feed)
    got = unchecked_run(sessions.encoder)(sessions.cross_names, feed)
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    with pytest.raises(Exception, match=names.ENC_ATTENTION_MASK) as raised:
        unchecked_run(sessions.encoder)(sessions.cross_names, {names.ENC_INPUT_IDS: ids})
    assert not isinstance(raised.value, ValueError)  # the C++ session's error, not the Python wrapper's check


def test_unchecked_run_falls_back_to_run_without_a_cpp_session(tiny_model_dir: Path) -> None:
    class Wrapper:  # a session type that keeps its C++ session elsewhere
        def __init__(self) -> None:
            self.calls: list[Any] = []

        def run(self, names: list[str], feed: dict[str, Any]) -> list[Any]:
            self.calls.append((names, feed))
            return ["out"]

    wrapper = Wrapper()
    run = unchecked_run(wrapper)
    assert run(["y"], {"x": 1}) == ["out"] and wrapper.calls == [(["y"], {"x": 1})]
    session = ort.InferenceSession(str(tiny_model_dir / names.ENCODER_FILE), providers=["CPUExecutionProvider"])
    assert unchecked_run(session) != session.run  # a CPU session: its C++ run

    class OnCuda(Wrapper):
        _sess = session._sess  # a C++ session, but not a CPU one: the wrapper keeps its provider fallback

        def get_providers(self) -> list[str]:
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    on_cuda = OnCuda()
    assert unchecked_run(on_cuda)(["y"], {"x": 2}) == ["out"] and on_cuda.calls == [(["y"], {"x": 2})]
