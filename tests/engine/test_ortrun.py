"""engine.ortrun.unchecked_run: the same outputs as InferenceSession.run, errors still raised, a fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from transduce.engine.ortrun import unchecked_run
from transduce.engine.translator import Translator


def test_unchecked_run_gives_what_run_gives_and_still_refuses_a_missing_input(tiny_translator: Translator) -> None:
    sessions = tiny_translator.runner.sessions
    ids = np.array([[5, 6, 7, 2]], np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    expected = sessions.encoder.run(sessions.cross_names, feed)
    got = unchecked_run(sessions.encoder)(sessions.cross_names, feed)
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    with pytest.raises(Exception, match="attention_mask"):
        unchecked_run(sessions.encoder)(sessions.cross_names, {"input_ids": ids})


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
    session = ort.InferenceSession(str(tiny_model_dir / "encoder.onnx"), providers=["CPUExecutionProvider"])
    assert unchecked_run(session) != session.run  # the real session: its C++ run
