"""The "limit" column of ``transduce bench engines``: ISA parsing, the roofline formulas, the measurements."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from transduce.bench import hardware
from transduce.bench.engines import markdown, with_limit
from transduce.bench.hardware import DecoderDims, limit_tokens_per_s

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 amx_tile amx_int8 x2apic

processor\t: 1
model name\t: some other model
flags\t\t: fpu
"""
ARM = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd asimddp sve i8mm bf16 cpuid\nCPU part\t: 0xd40\n"

# d 4, d_ff 8, 2 layers, vocab 10. Per hypothesis and step: 2 x (6 x 16 + 2 x 4 x 8) + 4 x 10 = 360 multiply-adds;
# the same 360 matmul weights; float32 vectors 2 x (13 x 4 + 8) + one embedding row 4 = 124.
TINY = DecoderDims(d_model=4, d_ff=8, n_layers=2, vocab=10)
STATS = ("sentences_per_s", "p50_batch_ms", "p95_batch_ms", "peak_rss_mb")


def test_parse_cpuinfo_x86_and_arm() -> None:
    assert hardware.parse_cpuinfo(X86) == (
        "Intel(R) Xeon(R) Platinum 8480+",
        ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "amx_tile", "amx_int8"),
    )  # fmt: skip
    assert hardware.parse_cpuinfo(ARM) == ("", ("asimd", "asimddp", "i8mm", "bf16", "sve"))
    info = hardware.cpu_info()
    assert info.cores >= 1 and info.model and f"{info.cores} cores" in info.describe()


def test_decoder_counts_by_hand() -> None:
    assert TINY.step_macs() == 360
    assert TINY.step_macs(attention_positions=10) == 360 + 2 * 2 * 4 * 10
    assert TINY.step_weight_bytes("fp32") == 4 * 360 + 4 * 124
    assert TINY.step_weight_bytes("int8") == 360 + 4 * 124
    assert len(TINY.gemm_shapes(128)) == 2 * 8 + 1 and TINY.gemm_shapes(128)[-1] == (128, 4, 10)
    pre = DecoderDims(4, 8, 2, 10, final_logits_bias=True, pre_norm=True)  # + final norm 2 d + logits bias V
    assert pre.step_weight_bytes("fp32") == TINY.step_weight_bytes("fp32") + 4 * (8 + 10)


def test_limit_is_a_roofline() -> None:
    fp32 = TINY.step_weight_bytes("fp32")  # 1936 bytes
    memory = limit_tokens_per_s(TINY, precision="fp32", beam=1, batch=1, bandwidth=fp32 * 1000.0)
    assert memory == hardware.Limit(1000.0, "memory")  # one token per step, 1000 steps/s
    int8 = limit_tokens_per_s(TINY, precision="int8", beam=1, batch=1, bandwidth=fp32 * 1000.0)
    assert int8.tokens_per_s == pytest.approx(1000.0 * 1936 / 856)
    # batch 32 beam 4: 128 hypotheses x 360 multiply-adds at 128 x 360 x 500 /s: 2 ms a step, 32 tokens a step
    compute = limit_tokens_per_s(
        TINY, precision="fp32", beam=4, batch=32, bandwidth=fp32 * 1000.0, gemm_rate=128 * 360 * 500.0
    )
    assert compute.bound == "compute" and compute.tokens_per_s == pytest.approx(32 * 500.0)
    assert limit_tokens_per_s(TINY, precision="fp32", beam=4, batch=32, gemm_rate=128 * 360 * 500.0) == compute
    with pytest.raises(ValueError):
        limit_tokens_per_s(TINY, precision="fp32", beam=1, batch=1)


def test_weight_bytes_match_the_exported_decoder(tiny_model_dir: Path) -> None:
    """Every initializer of decoder.onnx but the embedding table (gathered one row a step) is read each step, once
    per node using it (the exporter stores equal random-init biases and norms once, shared by several nodes)."""
    import onnx
    from onnx import numpy_helper

    config = json.loads((tiny_model_dir / "manifest.json").read_text())["model_config"]
    graph = onnx.load(str(tiny_model_dir / "decoder.onnx")).graph
    size = {t.name: numpy_helper.to_array(t).nbytes for t in graph.initializer}
    read = sum(size[x] for node in graph.node for x in node.input if x in size)
    matmul = sum(size[n.input[1]] for n in graph.node if n.op_type == "MatMul" and n.input[1] in size)
    dims = DecoderDims.from_model_config(config)
    assert matmul == 4 * sum(k * n for _, k, n in dims.gemm_shapes(1))
    d, table = config["d_model"], config["tgt_vocab_size"] * config["d_model"] * 4
    assert read - table == dims.step_weight_bytes("fp32") - 4 * d  # the formula adds the one embedding row


def test_measurements_are_positive_and_finite() -> None:
    bandwidth = hardware.measure_bandwidth(1 << 20, threads=2, repeats=2)
    gemm = hardware.measure_gemm_rate(TINY.gemm_shapes(8) + [(8, 16, 32)], repeats=2)
    rates = hardware.measure(TINY, [8, 16], threads=1, nbytes=1 << 20)
    for value in (bandwidth, gemm, rates.bandwidth, *rates.gemm_rate.values()):
        assert math.isfinite(value) and value > 0
    assert set(rates.gemm_rate) == {8, 16}
    assert hardware.last_level_cache_bytes() is None or hardware.last_level_cache_bytes() > 0  # type: ignore[operator]


def test_engine_rows_get_a_limit_and_the_table_shows_it() -> None:
    rates = hardware.Rates(bandwidth=1936 * 1000.0, gemm_rate={128: 128 * 360 * 500.0}, threads=2)
    rows = [
        with_limit({"engine": "transduce-cpu-fp32", "beam": 1, "batch": 1, "target_tokens_per_s": 250.0}, TINY, rates),
        with_limit({"engine": "ctranslate2-int8", "beam": 4, "batch": 32, "target_tokens_per_s": 8000.0}, TINY, rates),
        with_limit({"engine": "transduce-cuda-fp16", "beam": 1, "batch": 1, "error": "no CUDA"}, TINY, rates),
    ]
    assert (
        rows[0]["limit_tokens_per_s"] == 1000.0 and rows[0]["of_limit"] == 0.25 and rows[0]["limit_bound"] == "memory"
    )
    assert rows[1]["limit_tokens_per_s"] == 16000.0 and rows[1]["of_limit"] == 0.5
    assert "limit_tokens_per_s" not in rows[2]
    hw = {"read_bandwidth_gb_s": 0.0, "gemm_gflop_s_by_rows": {128: 0.0}, "method": "roofline"}
    result = {"machine": "m", "threads": 2, "date": "d", "sentences": 1, "batch1_sentences": 1, "settings": "s"}
    table = markdown(result | {"hardware": hw, "rows": [{**dict.fromkeys(STATS, 1), **r} for r in rows[:1]]})
    assert "| limit tok/s | of limit |" in table and "| 250.0 | 1000.0 (memory) | 0.25 |" in table
