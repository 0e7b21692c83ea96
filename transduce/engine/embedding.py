"""The export's embedding table, mapped into memory once and given to every graph that gathers from it.

A model that ties its embeddings holds one (V, d_model) table in the encoder's weights, the decoder's and the output
projection (``transduce.export.embedding``). Each graph read its own copy: the encoder's and the decoder's pages were
mapped from their weights files as sentences used them, and the shortlist kept its projection rows on the heap.
Now the engine maps the export's ``embedding.npy`` once and gives it, through onnxruntime's ``add_initializer``
(the memory is the caller's, not copied), to the graphs the manifest names, and uses it as the shortlist's float32
projection rows: one copy, pages shared with every process serving the same files.

onnxruntime reads an initializer given this way in place of the graph's own, whose pages it never loads, but keeps no
reference to it: ``open_given`` keeps the table as long as the session (and ``ortrun.unchecked_run`` keeps the
session). CPU sessions only: a CUDA session copies its weights to the device anyway."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from transduce.engine.denormals import open_session
from transduce.engine.errors import ModelLoadError
from transduce.engine.manifest import Manifest


@dataclass(frozen=True)
class Embedding:
    """The mapped table and, for each graph file that gathers from it, that graph's name for it."""

    table: np.ndarray  # (V, d_model) float32, read-only, mapped from the file
    value: ort.OrtValue  # the same memory, as onnxruntime takes it (kept alive with the sessions that use it)
    initializers: Mapping[str, str]  # graph file name -> initializer name

    @classmethod
    def of(cls, table: np.ndarray, initializers: Mapping[str, str]) -> Embedding:
        """``table`` (C-ordered float32, not copied) for the graphs ``initializers`` names."""
        return cls(table, ort.OrtValue.ortvalue_from_numpy(table), dict(initializers))

    def for_graph(self, graph: str | Path) -> dict[str, ort.OrtValue]:
        """The initializers to give the session of ``graph`` (none when it does not gather from the table)."""
        name = self.initializers.get(Path(graph).name)
        return {} if name is None else {name: self.value}


_HELD: weakref.WeakKeyDictionary[ort.InferenceSession, Embedding] = weakref.WeakKeyDictionary()


def open_given(
    graph: Path, options: ort.SessionOptions, providers: list[str], embedding: Embedding | None
) -> ort.InferenceSession:
    """A session of ``graph`` given ``embedding``'s table in place of its own copy, where it holds one (``options``
    are the session's own: they are changed). The table lives as long as the session does: onnxruntime reads its
    memory at every run without holding a reference to it, so a session that outlived it would read freed memory."""
    given = embedding.for_graph(graph) if embedding is not None else {}
    for name, value in given.items():
        options.add_initializer(name, value)
    session = open_session(str(graph), options, providers)
    if given:
        _HELD[session] = embedding  # type: ignore[assignment]  # (not None when anything was given)
    return session


def load_embedding(manifest: Manifest) -> Embedding | None:
    """The manifest's "embedding" table mapped into memory; None for an export without one (before revision 7, a
    float16 export). A damaged entry or file raises ModelLoadError saying to export again. The entry is trusted to
    name initializers of the table's shape (the exporter verified the graphs with it given); onnxruntime does not
    check a given initializer against the graph's."""
    entry = manifest.raw.get("embedding")
    if entry is None:
        return None
    where = manifest.model_dir / "manifest.json"
    initializers = entry.get("initializers") if isinstance(entry, dict) else None
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("file"), str)
        or not isinstance(initializers, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in initializers.items())
    ):
        raise ModelLoadError(f"{where}: 'embedding' must name a file and the graphs' initializers: re-export the model")
    path = manifest.model_dir / entry["file"]
    try:
        table = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ModelLoadError(f"{path} is not a readable .npy table ({exc}): re-export the model") from exc
    expected = (manifest.vocab_size, manifest.n_heads * manifest.d_k)
    if table.dtype != np.float32 or table.shape != expected or not table.flags.c_contiguous:
        order = "" if table.flags.c_contiguous else ", Fortran-ordered,"
        raise ModelLoadError(
            f"{path} holds a {table.dtype} array of shape {tuple(table.shape)}{order} not the model's C-ordered "
            f"float32 embedding table {expected}: re-export the model"
        )
    return Embedding.of(table, initializers)
