"""Denormals are flushed on the threads that decode, while they decode, and translations do not change."""

from __future__ import annotations

import asyncio
import contextlib
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from transduce.engine import denormals
from transduce.engine.denormals import FTZ_DAZ, flags, flushing_denormals, supported
from transduce.engine.options import DecodeOptions, SchedulerConfig
from transduce.engine.scheduler import StepScheduler
from transduce.engine.session import session_options
from transduce.engine.translator import Translator

X86_LINUX = sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")


def product_of_two_small_floats() -> float:
    """1e-30 x 1e-10 in float32: two normal numbers whose product is a denormal (about 1e-40) under IEEE rules,
    zero when flushed (FTZ)."""
    small, scale = np.array([1e-30], np.float32), np.array([1e-10], np.float32)
    return float((small * scale)[0])


def denormal_plus_itself() -> float:
    """A denormal input (1e-40) added to itself: 2e-40 under IEEE rules, zero when denormal inputs read as zero
    (DAZ)."""
    tiny = np.array([1e-40], np.float32)
    return float((tiny + tiny)[0])


def test_supported_on_x86_64_linux() -> None:
    assert supported() == X86_LINUX  # CI runs here: the feature is on where it matters


def test_flushing_applies_inside_the_block_only_and_nests() -> None:
    assert flags() == 0
    assert product_of_two_small_floats() != 0.0 and denormal_plus_itself() != 0.0
    with flushing_denormals():
        assert flags() == (FTZ_DAZ if supported() else 0)
        assert (product_of_two_small_floats() == 0.0) == supported()
        assert (denormal_plus_itself() == 0.0) == supported()
        with flushing_denormals():
            assert flags() == (FTZ_DAZ if supported() else 0)
        assert flags() == (FTZ_DAZ if supported() else 0)  # the inner block put back the outer one's mode
    assert flags() == 0
    assert product_of_two_small_floats() != 0.0 and denormal_plus_itself() != 0.0


def test_sessions_flush_denormals_on_their_own_pools() -> None:
    opts = session_options(1, 1)
    assert opts.get_session_config_entry(denormals.SESSION_CONFIG_KEY) == "1"


def spy_on_steps(translator: Translator, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every runner's step records the calling thread's FTZ/DAZ bits."""
    seen: list[int] = []
    for runner in translator.runners:
        step: Callable[..., Any] = runner.step

        def spied(*args: Any, _step: Callable[..., Any] = step) -> Any:
            seen.append(flags())
            return _step(*args)

        monkeypatch.setattr(runner, "step", spied)
    return seen


def test_the_translator_flushes_while_it_decodes_and_gives_the_thread_back(
    tiny_translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_on_steps(tiny_translator, monkeypatch)
    for beam in (1, 3):
        tiny_translator.translate(
            ["Hello world.", "A big red house."],
            source_lang="en",
            target_lang="de",
            options=DecodeOptions(beam_size=beam),
        )
    assert seen and set(seen) == {FTZ_DAZ if supported() else 0}
    assert flags() == 0


def test_the_scheduler_worker_flushes_while_it_decodes(
    tiny_translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = spy_on_steps(tiny_translator, monkeypatch)

    async def one_request() -> None:
        scheduler = StepScheduler(tiny_translator, SchedulerConfig())
        await scheduler.start()
        try:
            await scheduler.submit(["The cat sees the dog."], source_lang="en", target_lang="de")
        finally:
            await scheduler.stop(drain=False, timeout=10)

    asyncio.run(one_request())
    assert seen and set(seen) == {FTZ_DAZ if supported() else 0}
    assert flags() == 0  # the event loop's thread was never touched


FIRST_SESSION = """
import sys
import onnxruntime as ort
from transduce.engine.denormals import flags, open_session
from transduce.engine.session import session_options
from transduce.engine.topk import topk_graph
opts = session_options(1, 1)
if sys.argv[1] == "open_session":
    open_session(topk_graph(), opts, ["CPUExecutionProvider"])
else:
    ort.InferenceSession(topk_graph(), opts, providers=["CPUExecutionProvider"])
print(flags())
"""


@pytest.mark.parametrize("opener", ["open_session", "onnxruntime"])
def test_the_first_session_of_a_process_leaves_the_opening_threads_mode_as_it_was(opener: str) -> None:
    """In a fresh process (onnxruntime sets the mode once, at its first session): ours leave the thread as it was,
    onnxruntime alone leaves it flushing."""
    out = subprocess.run([sys.executable, "-c", FIRST_SESSION, opener], capture_output=True, text=True, check=True)
    expected = FTZ_DAZ if opener == "onnxruntime" and supported() else 0
    assert int(out.stdout.strip()) == expected


def test_opening_sessions_leaves_the_threads_mode_as_it_was(tiny_model_dir: Any) -> None:
    """onnxruntime sets the first session's mode on the opening thread for good; ours never change it."""
    Translator(tiny_model_dir, device="cpu", intra_threads=1, replicas=1)
    assert flags() == 0
    with flushing_denormals():
        Translator(tiny_model_dir, device="cpu", intra_threads=1, replicas=1)
        assert flags() == (FTZ_DAZ if supported() else 0)
    assert flags() == 0


def test_translations_are_the_same_with_denormals_kept(
    default_translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped model, a padded batch (masked source positions) with the shortlist's masked candidates: greedy and
    beam 4 give the same tokens and scores with and without flushing."""
    texts = [
        "In the beginning God created the heaven and the earth.",
        "Hello.",
        "The small dog runs across the old bridge to the market every morning.",
        "Thank you very much!",
    ]

    def run() -> list[tuple[list[int], float]]:
        out = []
        for beam in (1, 4):
            results = default_translator.translate(
                texts, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=beam, return_scores=True)
            )
            out += [(r.tokens[0], round(r.scores[0], 4)) for r in results]
        return out

    flushed = run()
    monkeypatch.setattr("transduce.engine.translator.flushing_denormals", contextlib.nullcontext)
    assert run() == flushed
