"""The CPU decoder (fused self-attention, written by hand) against the traced decoder step, on every model shape the
exporter handles, and its use by the engine and int8 quantisation."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from transduce.engine import io_names as names
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
from transduce.export.fused_decoder import fused_decoder_step
from transduce.export.graphs import DecoderStepGraph, dummy_inputs
from transduce.export.onnx_export import ExportConfig, export_model
from transduce.export.verify import _compare_beams
from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer

SHAPES: dict[str, dict[str, Any]] = {
    "post-norm relu (the paper, the shipped model)": {},
    "pre-norm gelu": {"norm_position": "pre", "activation": "gelu"},
    "Marian-like: swish, logits bias, concat sinusoids, unscaled embeddings": {
        "activation": "swish",
        "final_logits_bias": True,
        "sinusoid_layout": "concat",
        "scale_embedding": False,
    },
}


def _model(**overrides: Any) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=120,
        tgt_vocab_size=120,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_encoder_layers=1,
        n_decoder_layers=2,
        max_positions=64,
        languages=("de", "en"),
        **overrides,
    )
    model = Transformer(config).eval()
    with torch.no_grad():  # away from the initial zero biases, so a bias the graph forgot shows
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("shape", SHAPES)
def test_fused_step_computes_what_the_traced_step_computes(shape: str) -> None:
    model = _model(**SHAPES[shape])
    L = model.config.n_decoder_layers
    # 2 sentences x 2 beams sharing their sentence's cross K/V, rows at different positions with cache padding
    inputs = list(dummy_inputs(model)["decoder"])
    rng = np.random.default_rng(1)
    for j in range(4, len(inputs)):  # non-zero caches
        inputs[j] = torch.from_numpy(rng.standard_normal(tuple(inputs[j].shape)).astype(np.float32))
    with torch.no_grad():
        expected = DecoderStepGraph(model)(*inputs)
    graph = fused_decoder_step(model)
    session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    feed = {n: t.numpy() for n, t in zip(names.decoder_input_names(L), inputs, strict=True)}
    got = session.run([names.DEC_LOG_PROBS, *names.present_names(L)], feed)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours, theirs.numpy(), atol=2e-5)
    ops = Counter(n.op_type for n in onnx.load_from_string(graph).graph.node)
    assert ops["MultiHeadAttention"] == L and ops["Concat"] == 1  # the cache is appended inside the fused node


def test_export_writes_and_verifies_the_cpu_decoder(tiny_model_dir: Path) -> None:
    manifest = json.loads((tiny_model_dir / "manifest.json").read_text())
    assert manifest["cpu_decoder"] == names.CPU_DECODER_FILE and names.CPU_DECODER_FILE in manifest["checksums"]
    cases = [c["case"] for c in manifest["verification"]["cases"]]
    assert f"real batch 5 (padded), {names.CPU_DECODER_FILE}" in cases and "real batch 5 (padded)" in cases
    assert {
        "beams sharing cross K/V, padded caches",
        f"beams sharing cross K/V, padded caches, {names.CPU_DECODER_FILE}",
    } <= set(cases)
    assert manifest["verification"]["greedy_identical"]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_cpu_decoder_translates_as_the_traced_one(tiny_model_dir: Path, tmp_path: Path, beam_size: int) -> None:
    traced = tmp_path / "traced"
    shutil.copytree(tiny_model_dir, traced)
    manifest = json.loads((traced / "manifest.json").read_text())
    del manifest["cpu_decoder"], manifest["checksums"][names.CPU_DECODER_FILE]
    (traced / "manifest.json").write_text(json.dumps(manifest))
    (traced / names.CPU_DECODER_FILE).unlink()  # an export from before the CPU decoder: still served
    sentences = ["Hello world.", "The small blue dog runs to the green house and sees the water.", "Hallo Welt."]
    options = DecodeOptions(beam_size=beam_size, num_hypotheses=beam_size, return_scores=True)
    results = []
    for model_dir in (tiny_model_dir, traced):
        translator = Translator(model_dir, device="cpu", intra_threads=1)
        results.append(translator.translate(sentences, source_lang="en", target_lang="de", options=options))
    fused, plain = results
    graphs = [Translator(d, device="cpu", intra_threads=1).runner.sessions.decoder for d in (tiny_model_dir, traced)]
    assert [s.get_modelmeta().graph_name for s in graphs] == ["decoder_step_fused", "main_graph"]  # what the CPU loads
    assert [r.hypotheses for r in fused] == [r.hypotheses for r in plain]
    for a, b in zip(fused, plain, strict=True):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)


def test_an_older_opset_still_exports_a_verified_cpu_decoder(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The traced graphs follow the opset asked for; the CPU decoder needs LayerNormalization (opset 17)."""
    manifest = export_model(tiny_checkpoint, tmp_path / "m", ExportConfig(opset=14))
    assert manifest["opset"] == 14 and manifest["cpu_decoder"] == names.CPU_DECODER_FILE
    cpu = onnx.load(str(tmp_path / "m" / names.CPU_DECODER_FILE))
    assert {o.domain: o.version for o in cpu.opset_import}[""] == 17
    assert manifest["verification"]["greedy_identical"]  # both decoders checked against PyTorch


def test_export_verification_checks_a_step_with_beams_and_padded_caches() -> None:
    model = _model(norm_position="pre")
    other = _model(norm_position="pre", activation="gelu")  # a graph that does not compute the model's step
    good = ort.InferenceSession(fused_decoder_step(model), providers=["CPUExecutionProvider"])
    bad = ort.InferenceSession(fused_decoder_step(other), providers=["CPUExecutionProvider"])
    diff, same = _compare_beams(model, good, seed=0)
    assert diff < 1e-4 and same
    diff, _ = _compare_beams(model, bad, seed=0)
    assert diff > 1e-2
