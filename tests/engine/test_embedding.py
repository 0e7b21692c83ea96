"""The export's one embedding table: written once, found in each graph that gathers from it, mapped once by the
engine and given to those graphs and to the shortlist's projection rows, with translations unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transduce.engine.errors import ModelLoadError
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator

SOURCES = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23]]


def _copy(model_dir: Path, to: Path) -> Path:
    return Path(shutil.copytree(model_dir, to))


def _edit_manifest(model_dir: Path, edit: object) -> None:
    path = model_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)  # type: ignore[operator]
    manifest["checksums"].pop("embedding.npy", None)  # the file may be replaced: no checksum to fail first
    path.write_text(json.dumps(manifest))


def _without_entry(model_dir: Path, to: Path) -> Path:
    """A copy of ``model_dir`` as an export before revision 7 reads: the graphs use their own copies."""
    copy = _copy(model_dir, to)
    _edit_manifest(copy, lambda m: m.pop("embedding"))
    return copy


def _translations(model_dir: Path, beam: int) -> list[tuple[list[list[int]], list[float]]]:
    engine = Translator(model_dir, device="cpu", intra_threads=1)
    options = DecodeOptions(beam_size=beam, num_hypotheses=beam, return_scores=True)
    return [(r.tokens, r.scores) for r in engine.translate_batch(SOURCES, options=options)]


def test_the_export_writes_the_table_once_and_names_each_graph_holding_it(shortlist_model_dir: Path) -> None:
    import onnx
    from onnx import numpy_helper

    manifest = json.loads((shortlist_model_dir / "manifest.json").read_text())
    entry = manifest["embedding"]
    assert entry["file"] == "embedding.npy" and "embedding.npy" in manifest["checksums"]
    table = np.load(shortlist_model_dir / "embedding.npy")
    projection = np.load(shortlist_model_dir / "shortlist.npz")["projection"]
    assert table.dtype == np.float32 and np.array_equal(table, projection)  # the tied table is the output projection
    # the encoder's source embedding and every decoder's target embedding: the tiny model ties them
    assert set(entry["initializers"]) == {"encoder.onnx", "decoder.onnx", "decoder_cpu.onnx", "decoder_shortlist.onnx"}
    for file, name in entry["initializers"].items():
        graph = onnx.load(str(shortlist_model_dir / file)).graph
        (held,) = [numpy_helper.to_array(t) for t in graph.initializer if t.name == name]
        assert np.array_equal(held, table), file


@pytest.mark.parametrize("graph", ["encoder.onnx", "decoder_cpu.onnx"])
def test_each_graph_gathers_from_the_file_the_manifest_names(tiny_model_dir: Path, tmp_path: Path, graph: str) -> None:
    """What the encoder and the (CPU) decoder read is the mapped file, not their own copies: a table of zeros in it,
    given to either graph alone, changes the translations (the projection stays the decoder's own); without the
    entry they are as before."""
    before = _translations(tiny_model_dir, 1)
    zeroed = _copy(tiny_model_dir, tmp_path / "zeroed")
    np.save(zeroed / "embedding.npy", np.zeros_like(np.load(zeroed / "embedding.npy")))
    _edit_manifest(zeroed, lambda m: m["embedding"].update(initializers={graph: m["embedding"]["initializers"][graph]}))
    assert _translations(zeroed, 1) != before
    _edit_manifest(zeroed, lambda m: m.pop("embedding"))
    assert _translations(zeroed, 1) == before


def test_a_session_keeps_the_table_it_was_given(tiny_model_dir: Path) -> None:
    """onnxruntime keeps no reference to a given initializer: a session's run kept after its engine is dropped must
    keep the mapped table too (in a fresh process: without it the run reads unmapped memory and the process dies)."""
    script = f"""
import gc, json
import numpy as np
from transduce.engine.translator import Translator
engine = Translator({str(tiny_model_dir)!r}, device="cpu", intra_threads=1)
sessions = engine.runners[0].sessions
run, outputs = sessions.encoder_run, sessions.cross_names
assert sessions.embedding is not None
ids = np.array([[5, 6, 7, 8, 3]], np.int64)
feed = {{"input_ids": ids, "attention_mask": np.ones_like(ids)}}
before = run(outputs, feed)[0]
del engine, sessions
gc.collect()
junk = [np.full(1 << 18, 7.0, np.float32) for _ in range(16)]
print(json.dumps(bool(np.array_equal(before, run(outputs, feed)[0]))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert json.loads(done.stdout.strip().splitlines()[-1]) is True


def test_the_exporter_names_an_initializer_equal_bit_for_bit(tmp_path: Path) -> None:
    import onnx
    from onnx import helper, numpy_helper

    from transduce.export.embedding import tied_initializers

    table = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0
    signed = table.copy()
    signed[0, 0] = -0.0 if table[0, 0] == 0 else signed[0, 0]
    table[1, 2], signed[1, 2] = 0.0, -0.0  # equal as numbers, not as bits
    nodes = [helper.make_node("Gather", [n, "ids"], [f"out_{n}"]) for n in ("signed", "same")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [1])],
        [helper.make_tensor_value_info(f"out_{n}", onnx.TensorProto.FLOAT, None) for n in ("signed", "same")],
        [numpy_helper.from_array(signed, "signed"), numpy_helper.from_array(table.copy(), "same")],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "g.onnx"))
    assert tied_initializers(tmp_path, table, ["g.onnx", "missing.onnx"]) == {"g.onnx": "same"}
    assert tied_initializers(tmp_path, table[:2], ["g.onnx"]) == {}


@pytest.mark.parametrize("beam", [1, 3])
def test_translations_are_identical_with_the_shared_table(
    tiny_model_dir: Path, shortlist_model_dir: Path, tmp_path: Path, beam: int
) -> None:
    """Full vocabulary and shortlist, greedy and beam: the same tokens and scores as each graph's own copy."""
    for name, model in (("full", tiny_model_dir), ("shortlist", shortlist_model_dir)):
        assert _translations(model, beam) == _translations(_without_entry(model, tmp_path / name), beam), name


def test_one_mapping_serves_the_sessions_the_shortlist_and_the_replicas(shortlist_model_dir: Path) -> None:
    engine = Translator(shortlist_model_dir, device="cpu", intra_threads=2, replicas=2)  # sessions of their own
    first, second = (runner.sessions for runner in engine.runners)
    assert first.encoder is not second.encoder  # (replicas of one thread would share the first's sessions)
    embedding = first.embedding
    assert embedding is not None and second.embedding is embedding
    assert isinstance(embedding.table, np.memmap) and not embedding.table.flags.writeable
    assert first.shortlist is not None and first.shortlist.projection is not None
    assert np.shares_memory(first.shortlist.projection, embedding.table)  # no copy read from shortlist.npz
    assert embedding.for_graph(first.manifest.path("encoder")) and not embedding.for_graph("gather.onnx")


def test_an_int8_export_keeps_the_entry_for_its_quantised_graphs(shortlist_model_dir: Path, tmp_path: Path) -> None:
    from transduce.export.quantize import quantize_model_dir

    int8 = tmp_path / "int8"
    manifest = quantize_model_dir(shortlist_model_dir, int8)
    assert set(manifest["embedding"]["initializers"]) == {"encoder.onnx", "decoder.onnx", "decoder_shortlist.onnx"}
    assert (int8 / "embedding.npy").is_file() and "embedding.npy" in manifest["checksums"]
    for beam in (1, 3):  # its shortlist rows are int8, quantised from the table file's rows as before
        assert _translations(int8, beam) == _translations(_without_entry(int8, tmp_path / f"own{beam}"), beam)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda d: np.save(d / "embedding.npy", np.zeros((3, 4), np.float32)), "not the model's C-ordered float32"),
        (lambda d: np.save(d / "embedding.npy", np.zeros((120, 32), np.float64)), "not the model's C-ordered float32"),
        (lambda d: (d / "embedding.npy").write_bytes(b"not an array"), "not a readable .npy table"),
        (lambda d: (d / "embedding.npy").unlink(), "not a readable .npy table"),
        (lambda d: (d / "embedding.npy").write_bytes(b""), "not a readable .npy table"),
        (lambda d: np.save(d / "embedding.npy", np.asfortranarray(np.zeros((120, 32), np.float32))), "Fortran"),
        (lambda d: _edit_manifest(d, lambda m: m.update(embedding={"file": 3})), "'embedding' must name a file"),
        (
            lambda d: _edit_manifest(d, lambda m: m["embedding"].update(initializers=["encoder.onnx"])),
            "'embedding' must name a file",
        ),
    ],
)
def test_a_damaged_table_or_entry_is_refused_with_what_to_do(
    tiny_model_dir: Path, tmp_path: Path, damage: object, said: str
) -> None:
    model = _copy(tiny_model_dir, tmp_path / "model")
    _edit_manifest(model, lambda m: None)
    damage(model)  # type: ignore[operator]
    with pytest.raises(ModelLoadError, match="re-export the model") as caught:
        Translator(model, device="cpu", intra_threads=1)
    assert said in str(caught.value)
