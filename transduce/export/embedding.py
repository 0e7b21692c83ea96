"""One copy of the embedding table for the graphs that gather from it (``transduce.engine.embedding`` loads it).

The output projection shares the decoder's target embedding (section 3.4 of the paper), and the shipped model ties the
encoder's source embedding to them too: one (V, d_model) table. Each graph file holds it among its weights,
so an engine reading them all held it three times: the encoder's and the decoder's pages mapped from their weights
files, and the shortlist's projection rows read from ``shortlist.npz``. The export writes the table once more as
``embedding.npy`` and lists in the manifest, per graph file, the initializer that is exactly that table; the engine
maps the file once and gives it to those graphs in place of their own copies (onnxruntime's ``add_initializer``).

The graph files keep their own copies, so each still runs alone (another runtime, ``onnx.checker``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from transduce.engine import io_names as names


def tied_initializers(model_dir: Path, table: np.ndarray, files: Iterable[str]) -> dict[str, str]:
    """For each of ``files`` (graphs in ``model_dir``), the name of its float32 initializer equal to ``table`` bit
    for bit, where it has one (any such initializer holds the same values, so which one is named does not matter)."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    found: dict[str, str] = {}
    for file in files:
        path = model_dir / file
        if not path.is_file():
            continue
        graph = onnx.load(str(path), load_external_data=False).graph
        for tensor in graph.initializer:
            if tuple(tensor.dims) != table.shape or tensor.data_type != onnx.TensorProto.FLOAT:
                continue
            if uses_external_data(tensor):
                load_external_data_for_tensor(tensor, str(model_dir))
            if np.array_equal(numpy_helper.to_array(tensor).view(np.uint32), table.view(np.uint32)):  # bit for bit
                found[file] = tensor.name
                break
    return found


def add_embedding(model_dir: Path, table: np.ndarray, files: Iterable[str]) -> dict[str, Any]:
    """Write ``table`` as ``embedding.npy`` into an export and return the manifest's "embedding" entry naming the
    graphs of ``files`` that hold it; nothing (no file, no entry) when none does."""
    table = np.ascontiguousarray(table, dtype=np.float32)
    initializers = tied_initializers(model_dir, table, files)
    if not initializers:
        (model_dir / names.EMBEDDING_FILE).unlink(missing_ok=True)
        return {}
    np.save(model_dir / names.EMBEDDING_FILE, table)
    return {"embedding": {"file": names.EMBEDDING_FILE, "initializers": initializers}}
