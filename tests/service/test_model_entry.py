"""What loading a model is expected to cost at least: its graphs and their weights files."""

from __future__ import annotations

from pathlib import Path

from transduce.service.model_entry import graphs_bytes
from transduce.service.registry import read_spec


def test_the_cost_floor_counts_the_weights_stored_beside_the_graphs(tiny_model_dir: Path) -> None:
    files = ["encoder.onnx", "encoder.onnx.data", "decoder.onnx", "decoder.onnx.data"]
    sizes = {f: (tiny_model_dir / f).stat().st_size for f in files}
    assert sizes["decoder.onnx.data"] > 3 * sizes["decoder.onnx"]  # the weights are in the .data file
    assert graphs_bytes(read_spec(tiny_model_dir)) == sum(sizes.values())
