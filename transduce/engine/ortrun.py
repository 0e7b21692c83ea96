"""``InferenceSession.run`` without the Python wrapper's per-call checks, for the engine's hot loops."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import onnxruntime as ort

Run = Callable[[list[str], Mapping[str, Any]], list[Any]]
CPU = "CPUExecutionProvider"  # onnxruntime's CPU provider (engine.runner's CUDA beside it)


def unchecked_run(session: ort.InferenceSession) -> Run:
    """``session.run`` straight into onnxruntime's C++ session, skipping what the Python wrapper checks at every call
    (each required input named in the feed, each OrtValue belonging to a compatible session, WebGPU graph capture):
    the engine feeds every input as a numpy array, and a missing one still fails, in the C++ session. The checks cost
    about 10 us a call, 3-4 % of an int8 decoder step at batch 1.

    For sessions on the CPU only: the wrapper's retry on other providers after an execution provider failure is lost
    here, and the C++ session is the one the wrapper held now (``set_providers`` later would not be seen). Other
    sessions, and a wrapper that keeps no C++ session in ``_sess`` (onnxruntime 1.31's layout), get ``session.run``."""
    inner = getattr(session, "_sess", None)
    if inner is None or not callable(getattr(inner, "run", None)) or session.get_providers()[:1] != [CPU]:
        return session.run

    return _Unchecked(session, inner)


class _Unchecked:
    """The C++ session's run, holding its wrapper too: what the wrapper keeps alive (the initializers it was given,
    ``engine.embedding.open_given``) lives as long as this run can be called."""

    __slots__ = ("_inner", "_session")

    def __init__(self, session: ort.InferenceSession, inner: Any) -> None:
        self._session, self._inner = session, inner

    def __call__(self, output_names: list[str], feed: Mapping[str, Any]) -> list[Any]:
        return self._inner.run(output_names, feed, None)
