"""One model of a server with several (``TRANSDUCE_MODELS``): a ``ModelEntry`` is one version of one model
directory, with its engine and pipeline while it is loaded; and how its memory is measured."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from transduce.engine.errors import ModelLoadError
from transduce.engine.io_names import weights_file
from transduce.engine.translator import count_source_tokens
from transduce.service.engine_api import TranslatorLike
from transduce.service.model_metrics import ModelGauge
from transduce.service.pipeline import TranslationPipeline
from transduce.service.registry import ModelSpec
from transduce.tokenizer import Tokenizer

State = Literal["unloaded", "loading", "ready", "failed"]
MB = 1 << 20


def resident_bytes() -> int:
    """The process's resident memory (VmRSS of /proc/self/status), 0 where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def graphs_bytes(spec: ModelSpec) -> int:
    """The size of a model's encoder and decoder graphs and their weights files (the floor of what loading costs)."""
    if spec.manifest is None:
        return 0
    total = 0
    for key in ("encoder", "decoder"):
        graph = spec.manifest.path(key)
        for file in (graph, graph.with_name(weights_file(graph.name))):
            with contextlib.suppress(OSError):
                total += file.stat().st_size
    return total


def failure(exc: BaseException) -> str:
    """Why a model cannot be served, in one line."""
    return str(exc) if isinstance(exc, ModelLoadError) else f"{type(exc).__name__}: {exc}"


@dataclass(eq=False)
class ModelEntry:
    """One version of one model directory, and its loaded engine and pipeline when it is ready."""

    spec: ModelSpec
    state: State = "unloaded"
    reason: str | None = None
    translator: TranslatorLike | None = None
    pipeline: TranslationPipeline | None = None
    in_flight: int = 0  # requests holding the model or waiting for it to load: never unloaded while > 0
    last_used: float = 0.0
    memory_bytes: int = 0
    load_ms: float | None = None
    loading: asyncio.Task[None] | None = None
    retired: bool = False  # removed or replaced by a reload: unloads once idle
    leaving: bool = False  # a reload in progress removes it (at its end): never loaded meanwhile
    tokenizer: Tokenizer | None = None  # read on its own (no onnxruntime) to count tokens before the model loads

    def count_tokens(self, text: str) -> int:
        """Source tokens of ``text`` for this model (its tokenizer alone when the model is not loaded; 0 when even
        that cannot be read: the load will then fail and report why). Also called from a thread (a file's pieces
        are cut in one), while the event loop may unload the model: the translator is read once."""
        translator = self.translator
        if translator is not None:
            return translator.count_tokens(text)
        if self.tokenizer is None and self.spec.manifest is not None:
            m = self.spec.manifest
            try:
                self.tokenizer = Tokenizer(m.path("tokenizer"), target_tag=m.target_tag, languages=m.languages)
            except (OSError, ValueError, RuntimeError):
                return 0
        return count_source_tokens(self.tokenizer, text) if self.tokenizer is not None else 0

    @property
    def max_source_tokens(self) -> int:
        """The longest source the model takes."""
        if self.translator is not None:
            return self.translator.max_source_tokens
        return self.spec.manifest.max_positions if self.spec.manifest is not None else 0

    def health(self) -> dict[str, Any]:
        """This model's line in /health/ready."""
        return {
            "name": self.spec.name,
            "state": self.state,
            "reason": self.reason,
            "model": self.spec.model_name,
            "version": self.spec.version,
            "pairs": [f"{a}-{b}" for a, b in self.spec.pairs],
            "memory_mb": round(self.memory_bytes / MB, 1) if self.state == "ready" else None,
            "load_ms": round(self.load_ms, 1) if self.load_ms is not None else None,
            "in_flight": self.in_flight,
        }


def health_lines(entries: dict[str, ModelEntry], retiring: Iterable[ModelEntry]) -> list[dict[str, Any]]:
    """Every model's state, for /health/ready (one line per name): a version a reload replaced that requests still
    use is listed in its name's ``retiring``; a removed one is a line in state ``retiring``."""
    lines = {n: {**e.health(), "retiring": []} for n, e in entries.items()}
    removed: dict[str, dict[str, Any]] = {}
    for e in sorted(retiring, key=lambda e: e.spec.name):
        line, name = e.health(), e.spec.name
        if name in lines or name in removed:  # (a removed name's other versions: under its one line)
            version = {k: line[k] for k in ("model", "version", "memory_mb", "in_flight")}
            (lines.get(name) or removed[name])["retiring"].append(version)
        else:
            removed[name] = {**line, "state": "retiring", "retiring": []}
    return [*lines.values(), *removed.values()]


def gauge_lines(entries: dict[str, ModelEntry], retiring: Iterable[ModelEntry]) -> list[ModelGauge]:
    """Every model's live facts, for /metrics: a retiring version's memory, requests and queue count with its
    name's (a removed model's: in state ``retiring``)."""
    gauges: dict[str, ModelGauge] = {}
    for e in (*entries.values(), *sorted(retiring, key=lambda e: e.spec.name)):
        n, queued = e.spec.name, e.pipeline.queue.queue_depth if e.pipeline is not None else 0
        had = gauges.get(n)
        state = e.state if n in entries and e is entries[n] else "retiring"
        gauges[n] = (
            ModelGauge(n, state, e.memory_bytes, e.in_flight, queued)
            if had is None
            else ModelGauge(
                n, had.state, had.memory_bytes + e.memory_bytes, had.in_flight + e.in_flight, had.queue_depth + queued
            )
        )
    return list(gauges.values())
