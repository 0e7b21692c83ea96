"""``InferenceSession.run`` without the Python wrapper's per-call checks, for the engine's hot loops."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import onnxruntime as ort

Run = Callable[[list[str], Mapping[str, Any]], list[Any]]


def unchecked_run(session: ort.InferenceSession) -> Run:
    """``session.run`` straight into onnxruntime's C++ session, skipping what the Python wrapper checks at every call
    (each required input named in the feed, each OrtValue's device, WebGPU graph capture): the engine feeds every input
    as a numpy array, and a missing one still fails, in the C++ session. The checks cost about 10 us a call, 3-4 % of
    an int8 decoder step at batch 1. Falls back to ``session.run`` where the wrapper keeps no C++ session in
    ``_sess`` (onnxruntime 1.31's layout)."""
    inner = getattr(session, "_sess", None)
    if inner is None or not callable(getattr(inner, "run", None)):
        return session.run

    def run(output_names: list[str], feed: Mapping[str, Any]) -> list[Any]:
        return list(inner.run(output_names, feed, None))

    return run
