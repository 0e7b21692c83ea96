"""``transduce export --dtype float16``: half-precision weights and caches, float32 log-probs, runs on the CPU too."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from transduce.engine.errors import ModelLoadError
from transduce.engine.manifest import load_manifest
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
from transduce.export.onnx_export import ExportConfig, export_model

SENTENCES = ["the house is big .", "a dog sees the water .", "the old man and the sea ."]


@pytest.fixture(scope="module")
def fp16_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fp16") / "model"
    export_model(tiny_checkpoint, out, ExportConfig(dtype="float16"))
    return out


def _elem(value_info: onnx.ValueInfoProto) -> int:
    return int(value_info.type.tensor_type.elem_type)


def test_weights_and_caches_are_half_and_log_probs_stay_float(fp16_dir: Path) -> None:
    manifest = json.loads((fp16_dir / "manifest.json").read_text())
    assert manifest["dtype"] == "float16" and load_manifest(fp16_dir).dtype == "float16"
    assert manifest["verification"]["max_abs_diff"] <= 0.1  # against the float32 PyTorch model
    decoder = onnx.load(str(fp16_dir / "decoder.onnx"))
    inputs = {v.name: _elem(v) for v in decoder.graph.input}
    outputs = {v.name: _elem(v) for v in decoder.graph.output}
    assert outputs.pop("log_probs") == onnx.TensorProto.FLOAT
    assert set(outputs.values()) == {onnx.TensorProto.FLOAT16}  # present K/V
    integer = ("input_ids", "encoder_attention_mask", "position_ids", "decoder_attention_mask")
    assert {inputs.pop(name) for name in integer} == {onnx.TensorProto.INT64}
    assert set(inputs.values()) == {onnx.TensorProto.FLOAT16}  # past and cross K/V
    assert {_elem(v) for v in onnx.load(str(fp16_dir / "gather.onnx")).graph.input[1:]} == {onnx.TensorProto.FLOAT16}
    matrices = [t for t in decoder.graph.initializer if len(t.dims) >= 2]  # weights (not shape constants)
    assert matrices and {t.data_type for t in matrices} == {onnx.TensorProto.FLOAT16}


def test_fp16_translations_track_fp32(fp16_dir: Path, tiny_translator: Translator) -> None:
    half = Translator(fp16_dir, device="cpu", intra_threads=1)
    for beam in (1, 3):
        options = DecodeOptions(beam_size=beam, max_decoding_length=12, return_scores=True)
        got = half.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
        ref = tiny_translator.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
        assert all(r.tokens[0] for r in got)
        pairs = [(a, b) for g, r in zip(got, ref, strict=True) for a, b in zip(g.tokens[0], r.tokens[0], strict=False)]
        agree = np.mean([a == b for a, b in pairs])
        assert agree >= 0.8, agree  # half precision may flip a near-tie, not the whole output
        assert np.allclose([g.scores[0] for g in got], [r.scores[0] for r in ref], atol=0.05 * 12)


def test_io_binding_path_reads_fp16_caches(fp16_dir: Path) -> None:
    """The device-resident path (gather.onnx in float16) gives what the numpy path gives."""
    from transduce.engine.iobinding_runner import IOBindingRunner

    plain = Translator(fp16_dir, device="cpu", intra_threads=1)
    bound = Translator(fp16_dir, device="cpu", intra_threads=1)
    bound.runner = IOBindingRunner(bound.runner.sessions)  # on the CPU provider: device 'cpu'
    options = DecodeOptions(beam_size=3)
    expected = plain.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
    got = bound.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
    assert [r.tokens for r in got] == [r.tokens for r in expected]


def test_bad_dtype_is_named(fp16_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype must be one of float32, float16"):
        ExportConfig(dtype="bfloat16")
    bad = tmp_path / "model"
    bad.mkdir()
    for f in fp16_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    manifest = json.loads((bad / "manifest.json").read_text())
    (bad / "manifest.json").write_text(json.dumps(manifest | {"dtype": "int4"}))
    with pytest.raises(ModelLoadError, match="dtype 'int4'"):
        load_manifest(bad)


def test_int8_quantisation_needs_a_float32_export(fp16_dir: Path, tmp_path: Path) -> None:
    from transduce.export.quantize import quantize_model_dir

    with pytest.raises(ValueError, match="starts from a float32 export"):
        quantize_model_dir(fp16_dir, tmp_path / "int8")
    assert not (tmp_path / "int8").exists()


def test_failed_quantisation_leaves_the_old_directory(tiny_model_dir: Path, tmp_path: Path) -> None:
    from transduce.export.quantize import quantize_model_dir

    dst = tmp_path / "int8"
    root = logging.getLogger()
    level, records = root.level, list[logging.LogRecord]()

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Kept()
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # as the command line logs
    try:
        quantize_model_dir(tiny_model_dir, dst)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert not [r for r in records if "Quantization parameters" in r.getMessage()]  # (34 INFO lines a tiny model)
    before = {f.name: f.read_bytes() for f in dst.iterdir()}
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_model_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "decoder_cpu.onnx").write_bytes(b"not onnx")  # the decoder int8 quantises
    with pytest.raises(Exception):  # noqa: B017 - whatever onnx raises for a corrupt graph
        quantize_model_dir(broken, dst)
    assert {f.name: f.read_bytes() for f in dst.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp directory left behind


def test_int8_weight_bits_follow_the_cpu_unless_set(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """7 bits where the CPU lacks VNNI (its int8 kernels saturate on full-range weights), or as
    TRANSDUCE_INT8_WEIGHT_BITS says (the Docker image is built on one machine and runs on others)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from transduce.export.quantize import quantize_model_dir

    def widest(model: Path) -> int:
        graph = onnx.load(str(model / "decoder.onnx")).graph
        weights = [numpy_helper.to_array(t) for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]
        return max(int(np.abs(w.astype(np.int16)).max()) for w in weights)

    for bits, peak in (("7", 64), ("8", 127)):
        monkeypatch.setenv("TRANSDUCE_INT8_WEIGHT_BITS", bits)
        manifest = quantize_model_dir(tiny_model_dir, tmp_path / bits)
        assert manifest["int8_weight_bits"] == int(bits) and widest(tmp_path / bits) <= peak
    assert widest(tmp_path / "8") > 64
    monkeypatch.setenv("TRANSDUCE_INT8_WEIGHT_BITS", "6")
    with pytest.raises(ValueError, match="TRANSDUCE_INT8_WEIGHT_BITS must be 7 or 8"):
        quantize_model_dir(tiny_model_dir, tmp_path / "six")


def test_int8_quantises_every_weight_matrix_of_the_decoder(tiny_model_dir: Path, tmp_path: Path) -> None:
    import onnx

    from transduce.engine.manifest import load_manifest
    from transduce.export.quantize import quantize_model_dir

    quantize_model_dir(tiny_model_dir, tmp_path / "int8")
    L = load_manifest(tiny_model_dir).n_layers
    ops = [n.op_type for n in onnx.load(str(tmp_path / "int8" / "decoder.onnx")).graph.node]
    # the CPU decoder's: per layer the joint q/k/v and the out projection of self-attention, q and out of
    # cross-attention, two feed-forward matrices; the output projection (a projection exported as Gemm would be left
    # in float32 by dynamic quantisation)
    assert ops.count("MatMulInteger") == 6 * L + 1 and "Gemm" not in ops
    assert ops.count("MultiHeadAttention") == L  # fused self-attention, left in float32
    assert not (tmp_path / "int8" / "decoder_cpu.onnx").exists()
    assert not (tmp_path / "int8" / "decoder_cpu.onnx.data").exists()
    # the int8 weights replace the float32 ones copied from the export: a quarter of their bytes, and checksummed
    for graph in ("encoder.onnx", "decoder.onnx"):
        int8, fp32 = (
            (tmp_path / "int8" / f"{graph}.data").stat().st_size,
            (tiny_model_dir / f"{graph}.data").stat().st_size,
        )
        assert int8 < 0.6 * fp32, graph
    checksums = json.loads((tmp_path / "int8" / "manifest.json").read_text())["checksums"]
    assert {"encoder.onnx.data", "decoder.onnx.data"} <= set(checksums)
    assert set(checksums) <= {f.name for f in (tmp_path / "int8").iterdir()}


def test_int8_of_an_export_before_revision_6_checksums_the_weights_files_it_writes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transduce.export.quantize import quantize_model_dir

    old = tmp_path / "old"
    old.mkdir()
    manifest = json.loads((tiny_model_dir / "manifest.json").read_text())
    for name in manifest["checksums"]:
        if name.endswith(".onnx"):  # each graph with its weights inside, as revision 5 wrote them
            onnx.save(onnx.load(str(tiny_model_dir / name)), str(old / name))
        elif not name.endswith(".data"):
            (old / name).write_bytes((tiny_model_dir / name).read_bytes())
    manifest["checksums"] = {k: v for k, v in manifest["checksums"].items() if not k.endswith(".data")}
    (old / "manifest.json").write_text(json.dumps(manifest))
    checksums = quantize_model_dir(old, tmp_path / "int8")["checksums"]
    assert {"encoder.onnx.data", "decoder.onnx.data"} <= set(checksums)
    assert set(checksums) <= {f.name for f in (tmp_path / "int8").iterdir()}
    Translator(tmp_path / "int8", device="cpu", intra_threads=1)  # every listed file matches its checksum


def test_an_int8_export_runs_on_the_cpu_when_the_device_is_auto(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU machine (CUDA offered here by a stand-in) an int8 export, made of CPU graphs, stays on the CPU."""
    import onnxruntime as ort

    from transduce.engine import session
    from transduce.engine.manifest import load_manifest
    from transduce.export.quantize import quantize_model_dir

    quantize_model_dir(tiny_model_dir, tmp_path / "int8")
    opened: list[list[str]] = []
    real = ort.InferenceSession

    def recording(path: str | bytes, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
        if isinstance(path, str):  # the model's graphs (the search's top-k graph, given as bytes, is always CPU)
            opened.append(list(providers))
        return real(path, options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(session, "choose_providers", lambda device: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(session.ort, "InferenceSession", recording)
    session.open_runner(load_manifest(tmp_path / "int8"), device="auto", intra_threads=1)
    assert opened == [["CPUExecutionProvider"]] * 2  # encoder and decoder
    opened.clear()
    session.open_runner(load_manifest(tiny_model_dir), device="auto", intra_threads=1)  # float32: CUDA first
    assert opened == [["CUDAExecutionProvider", "CPUExecutionProvider"]] * 2


def test_auto_engine_replicas_on_cuda_are_two_of_one_thread_and_a_cpu_fallback_gets_the_cpus(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA (a stand-in: sessions that run on the CPU but report CUDA when asked for it) auto replicas and threads
    make 2 engines of 1 thread: the GPU waits on each engine's host work between steps, and more threads only spin
    (bench/results/cuda-replicas-h200/). One replica has 1 thread too, and makes no shared pool (a later CPU model
    would run on it). Where CUDA is offered but the sessions fall back to the CPU, and for an int8 export (served on
    the CPU), the CPU's numbers: the cores shared out between 2 replicas, or one replica of every core on the shared
    pool. Numbers set are kept."""
    import onnxruntime as ort

    from transduce.engine import session, translator
    from transduce.engine.translator import Translator
    from transduce.export.quantize import quantize_model_dir

    gpu = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    cuda_opens = True
    cuda_sessions_left = 10**6  # graphs that may still open on CUDA (then onnxruntime falls back, e.g. out of memory)

    class StandIn(ort.InferenceSession):
        def __init__(self, path: str | bytes, options: ort.SessionOptions, providers: list[str]) -> None:
            nonlocal cuda_sessions_left
            super().__init__(path, options, providers=["CPUExecutionProvider"])
            self.on_cuda = cuda_opens and "CUDAExecutionProvider" in providers and cuda_sessions_left > 0
            cuda_sessions_left -= self.on_cuda

        def get_providers(self) -> list[str]:
            return gpu if self.on_cuda else super().get_providers()

    monkeypatch.setattr(session, "choose_providers", lambda device: gpu[1:] if device == "cpu" else gpu)
    monkeypatch.setattr(session.ort, "InferenceSession", StandIn)
    monkeypatch.setattr(session, "usable_cores", lambda: 8)

    def threads(engine: Translator) -> list[int]:
        return [r.sessions.options.intra_op_num_threads for r in engine.runners]

    pooled: list[bool] = []  # open_runner's shared_pool per opening (the suite's pool is never made: see conftest)
    real_open = translator.open_runner

    def recording_open(*args: Any, **kwargs: Any) -> Any:
        pooled.append(kwargs["shared_pool"])
        return real_open(*args, **kwargs)

    monkeypatch.setattr(translator, "open_runner", recording_open)
    on_gpu = Translator(tiny_model_dir, device="auto", replicas=0)
    assert on_gpu.runner.sessions.provider == "CUDAExecutionProvider" and threads(on_gpu) == [1, 1]
    one = Translator(tiny_model_dir, device="auto", replicas=1, shared_pool=True)
    assert one.runner.sessions.provider == "CUDAExecutionProvider" and threads(one) == [1]
    assert pooled[-1] is False  # the service and the command line ask for the pool: not made on CUDA
    assert threads(Translator(tiny_model_dir, device="cuda", replicas=1, intra_threads=4, shared_pool=True)) == [4]
    assert pooled[-1] is False
    assert threads(Translator(tiny_model_dir, device="auto", replicas=3, intra_threads=2)) == [2, 2, 2]
    cuda_opens = False  # offered, but the sessions fall back to the CPU (a GPU image on a host without a GPU)
    fallen = Translator(tiny_model_dir, device="auto", replicas=0)
    assert fallen.runner.sessions.provider == "CPUExecutionProvider" and threads(fallen) == [4, 4]
    pooled.clear()
    alone = Translator(tiny_model_dir, device="auto", replicas=1, shared_pool=True)
    assert alone.runner.sessions.provider == "CPUExecutionProvider" and threads(alone) == [8]
    assert pooled == [False, True]  # reopened with the CPU's plan: every core, on the shared pool
    cuda_opens, cuda_sessions_left = True, 3  # the first replica's encoder, decoder and cache gather; not the second
    short = Translator(tiny_model_dir, device="auto", replicas=0)
    assert [r.sessions.provider for r in short.runners] == ["CUDAExecutionProvider"]  # the second is not kept
    cuda_sessions_left = 10**6
    quantize_model_dir(tiny_model_dir, tmp_path / "int8")
    assert threads(Translator(tmp_path / "int8", device="auto", replicas=0)) == [4, 4]
    assert threads(Translator(tmp_path / "int8", device="cpu", replicas=1)) == [8]
    on_cuda_int8 = Translator(tmp_path / "int8", device="cuda", replicas=1)  # its int8 MatMuls run on the CPU
    assert on_cuda_int8.runner.sessions.provider == "CUDAExecutionProvider" and threads(on_cuda_int8) == [8]
