"""Export tests: graphs, manifest, parity with PyTorch (fp32), staleness and bad checkpoints."""

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from transduce.engine import io_names as names
from transduce.engine.errors import ModelLoadError
from transduce.engine.manifest import is_stale, load_manifest
from transduce.export.onnx_export import ExportConfig, export_model
from transduce.export.verify import _compare
from transduce.model.checkpoint import load_checkpoint


def test_model_directory_contents(tiny_model_dir: Path) -> None:
    files = {p.name for p in tiny_model_dir.iterdir()}
    assert {"encoder.onnx", "decoder.onnx", "tokenizer.model", "manifest.json", "gather.onnx"} <= files
    manifest = json.loads((tiny_model_dir / "manifest.json").read_text())
    assert manifest["pairs"] == [["de", "en"], ["en", "de"]]
    assert manifest["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "decoder_start": 2}
    verification = manifest["verification"]
    assert verification["max_abs_diff"] <= 1e-4 and verification["greedy_identical"]
    assert {c["case"] for c in verification["cases"]} >= {"random batch 1", "real batch 5 (padded)"}
    loaded = load_manifest(tiny_model_dir)
    assert loaded.n_layers == 2 and loaded.languages == ("de", "en")


def test_weights_lie_in_checksummed_files_beside_their_graphs(tiny_model_dir: Path, tmp_path: Path) -> None:
    checksums = json.loads((tiny_model_dir / "manifest.json").read_text())["checksums"]
    for graph in ("encoder.onnx", "decoder.onnx", "decoder_cpu.onnx"):
        weights = tiny_model_dir / f"{graph}.data"
        assert weights.name in checksums and graph in checksums
        # readable by whoever may read the graph (onnx writes the file 0600: a container's serving user could not)
        assert weights.stat().st_mode & 0o777 == (tiny_model_dir / graph).stat().st_mode & 0o777
        proto = onnx.load(str(tiny_model_dir / graph), load_external_data=False)
        stored = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert stored and all(t.external_data[0].value == weights.name for t in stored)  # location, in the one file
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in tiny_model_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    data = (copy / "decoder_cpu.onnx.data").read_bytes()
    flipped = bytes(b ^ 0xFF for b in data[-4:])
    (copy / "decoder_cpu.onnx.data").write_bytes(data[:-4] + flipped)  # one weight changed: refused, not served
    with pytest.raises(ModelLoadError, match=r"decoder_cpu\.onnx\.data does not match the checksum"):
        load_manifest(copy)
    (copy / "decoder_cpu.onnx.data").unlink()
    with pytest.raises(ModelLoadError, match=r"decoder_cpu\.onnx\.data named in .* is missing"):
        load_manifest(copy)


def test_graph_io_names_and_dynamic_axes(tiny_model_dir: Path) -> None:
    dec = onnx.load(str(tiny_model_dir / "decoder.onnx"))
    inputs = {i.name: i for i in dec.graph.input}
    per_row = {names.DEC_INPUT_IDS, names.DEC_POSITIONS, names.DEC_SELF_MASK}
    assert set(inputs) == {*per_row, names.DEC_ENCODER_MASK, *names.past_names(2), *names.cross_names(2)}
    mask_dims = inputs[names.DEC_SELF_MASK].type.tensor_type.shape.dim
    assert [d.dim_param for d in mask_dims] == [names.BATCH_AXIS, names.TOTAL_AXIS]
    dims = inputs[names.past_self(1, "value")].type.tensor_type.shape.dim
    assert dims[0].dim_param == names.BATCH_AXIS and dims[2].dim_param == names.PAST_AXIS
    assert [o.name for o in dec.graph.output] == [names.DEC_LOG_PROBS, *names.present_names(2)]
    cross_dims = inputs[names.cross(0, "key")].type.tensor_type.shape.dim
    assert cross_dims[0].dim_param == names.SENTENCE_AXIS and cross_dims[2].dim_param == names.SRC_AXIS
    enc = onnx.load(str(tiny_model_dir / "encoder.onnx"))
    assert [o.name for o in enc.graph.output] == [names.ENC_HIDDEN, *names.cross_names(2)]


DECODERS = [names.DECODER_FILE, names.CPU_DECODER_FILE]  # traced (CUDA, reference); fused self-attention (CPU)


@pytest.mark.parametrize("graph", DECODERS)
@pytest.mark.parametrize("lengths", [[7], [3, 11, 5], [1, 2, 9, 4, 6, 8]])
def test_parity_across_batch_sizes_and_padding(
    tiny_checkpoint: Path, tiny_model_dir: Path, lengths: list[int], graph: str
) -> None:
    model = load_checkpoint(tiny_checkpoint).model
    enc = ort.InferenceSession(str(tiny_model_dir / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(tiny_model_dir / graph), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(len(lengths))
    seqs = [rng.integers(5, model.config.src_vocab_size, n).tolist() + [model.config.eos_id] for n in lengths]
    diff, same = _compare(model, enc, dec, seqs, steps=10)
    assert diff <= 1e-4
    assert same


def test_stale_detection_and_reexport(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    assert is_stale(tiny_checkpoint, out)
    export_model(tiny_checkpoint, out, ExportConfig(verify=False))
    assert not is_stale(tiny_checkpoint, out)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "export_revision": 1}))
    assert is_stale(tiny_checkpoint, out)  # an older exporter's graphs: made again, though they still load
    assert load_manifest(out).model_name == manifest["model_name"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    other = tmp_path / "other.pt"
    payload = torch.load(tiny_checkpoint, weights_only=True)
    payload["meta"] = {"name": "changed"}
    torch.save(payload, other)
    assert is_stale(other, out)


def test_a_damaged_export_of_the_shipped_model_is_made_again(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The user cache's export is the project's own: a file of it missing or damaged (a cleaner, a disk) used to
    fail every command with "re-export the model", which its user cannot do. It is now exported again; its files are
    hashed only when one changed size or time since they last matched, not at every start."""
    import transduce.engine.manifest as manifest_module
    from transduce.shipped import STAMP_FILE, default_export_dir, resolve_model_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TRANSDUCE_DEFAULT_CHECKPOINT", str(tiny_checkpoint))
    monkeypatch.delenv("TRANSDUCE_DEFAULT_EXPORT_DIR", raising=False)
    out = resolve_model_dir(None)
    assert out == default_export_dir() and load_manifest(out).model_name
    hashed: list[str] = []
    real_hash = manifest_module.sha256_file

    def counting(path: str | Path) -> str:
        hashed.append(Path(path).name)
        return real_hash(path)

    monkeypatch.setattr(manifest_module, "sha256_file", counting)
    assert resolve_model_dir(None) == out and (out / STAMP_FILE).is_file()
    hashed.clear()
    assert resolve_model_dir(None) == out
    assert "encoder.onnx" not in hashed  # unchanged since they matched: only the checkpoint's staleness check
    data = out / "encoder.onnx.data" if (out / "encoder.onnx.data").is_file() else out / "encoder.onnx"
    whole = data.read_bytes()
    assert resolve_model_dir(None) == out  # stamped again
    # changed in place with its size and times put back (a restore, a copy with -p), cut short, deleted
    for damage in (bytes(len(whole)), whole[: len(whole) // 2], None):
        times = data.stat()
        if damage is None:
            data.unlink()
        else:
            data.write_bytes(damage)
            os.utime(data, ns=(times.st_atime_ns, times.st_mtime_ns))
        with caplog.at_level("WARNING", logger="transduce"):
            assert resolve_model_dir(None) == out
        assert "the shipped model's export is damaged" in caplog.text
        caplog.clear()
        assert data.read_bytes() == whole
        load_manifest(out)  # every file matches its checksum again
    monkeypatch.setenv("TRANSDUCE_DEFAULT_EXPORT_DIR", str(out))  # a directory of the operator's: checked, no stamp
    (out / STAMP_FILE).unlink(missing_ok=True)  # (an export made again has none until it is next checked)
    hashed.clear()
    assert resolve_model_dir(None) == out and not (out / STAMP_FILE).exists() and "encoder.onnx" in hashed


def test_bad_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="is not a transduce checkpoint, or is damaged"):
        export_model(bad, tmp_path / "out")
    with pytest.raises(ValueError, match="does not exist"):
        export_model(tmp_path / "missing.pt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("graph", DECODERS)
def test_decoder_graph_shares_cross_kv_between_beams(tiny_checkpoint: Path, tiny_model_dir: Path, graph: str) -> None:
    """The ONNX decoder over 3 rows per sentence (per-sentence cross K/V) matches PyTorch with them repeated."""
    model = load_checkpoint(tiny_checkpoint).model.float().eval()
    cfg, L, k = model.config, model.config.n_decoder_layers, 3
    enc = ort.InferenceSession(str(tiny_model_dir / "encoder.onnx"), providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(tiny_model_dir / graph), providers=["CPUExecutionProvider"])
    ids = np.array([[9, 12, 7, cfg.eos_id], [15, cfg.eos_id, cfg.pad_id, cfg.pad_id]], dtype=np.int64)
    mask = (ids != cfg.pad_id).astype(np.int64)
    cross = enc.run(names.cross_names(L), {names.ENC_INPUT_IDS: ids, names.ENC_ATTENTION_MASK: mask})
    past = [np.zeros((2 * k, cfg.n_heads, 0, cfg.d_k), np.float32)] * (2 * L)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        src_mask = torch.from_numpy(mask).bool()
        cross_pt = model.cross_kv(model.encode(torch.from_numpy(ids), src_mask))
        repeated = [(a.repeat_interleave(k, 0), b.repeat_interleave(k, 0)) for a, b in cross_pt]
        cache = None
        for step in range(4):
            tokens = rng.integers(4, cfg.tgt_vocab_size, (2 * k, 1))
            feed = {
                names.DEC_INPUT_IDS: tokens,
                names.DEC_ENCODER_MASK: mask,
                names.DEC_POSITIONS: np.full(2 * k, step, np.int64),
                names.DEC_SELF_MASK: np.ones((2 * k, step + 1), np.int64),
                **dict(zip(names.past_names(L), past, strict=True)),
                **dict(zip(names.cross_names(L), cross, strict=True)),
            }
            lp_ort, *past = dec.run([names.DEC_LOG_PROBS, *names.present_names(L)], feed)
            logits, cache = model.decode_step(
                torch.from_numpy(tokens), repeated, src_mask.repeat_interleave(k, 0), cache
            )
            lp_pt = torch.log_softmax(logits[:, -1], dim=-1).numpy()
            assert lp_ort.shape == (2 * k, cfg.tgt_vocab_size)
            np.testing.assert_allclose(lp_ort, lp_pt, atol=1e-4)
