"""What the machine can do, for the "limit" column of ``transduce bench engines``.

The limit of a row is a roofline: a decoder step cannot take less than reading every weight it uses once
(``step_weight_bytes`` / measured memory bandwidth) nor less than its multiply-adds at the measured GEMM rate
(``rows x step_macs`` / rate, rows = batch x beam); each step yields one target token per sentence of the batch.
Batch 1 is memory bound, batch 32 compute bound. Only the decoder counts (the encoder runs once per sentence),
and attention-score terms are left out unless ``attention_positions`` is given, so the limit is an upper bound.

Rates are measured with numpy: its BLAS (OpenBLAS in the wheels) is not onnxruntime's MLAS or CTranslate2's
oneDNN/MKL kernels, and runs float32 only, so an int8 engine using VNNI/AMX kernels can exceed its limit; a
model whose per-step weights fit in the last-level cache can exceed the batch-1 (DRAM bandwidth) limit too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from transduce.engine.cpu import parse_cpuinfo as engine_cpuinfo

# the ISA extensions that decide which GEMM kernels run (x86 /proc/cpuinfo "flags", aarch64 "Features")
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "bf16", "sve", "sve2",
)  # fmt: skip
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BYTES_PER_WEIGHT = {"fp32": 4, "fp16": 2, "int8": 1}  # of the matmul weights; biases and norms stay float32


@dataclass(frozen=True)
class CpuInfo:
    """CPU model, the cores this process may use, and which of ISA_FLAGS the CPU reports."""

    model: str
    cores: int
    isa: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.model}, {self.cores} cores, {platform.system()}, ISA {' '.join(self.isa) or 'baseline'}"


def parse_cpuinfo(text: str) -> tuple[str, tuple[str, ...]]:
    """(model name, the ISA_FLAGS present, in ISA_FLAGS order) from the text of /proc/cpuinfo (first CPU)."""
    model, flags = engine_cpuinfo(text)
    return model, tuple(f for f in ISA_FLAGS if f in flags)


def cpu_info() -> CpuInfo:
    """This machine's CpuInfo (model from /proc/cpuinfo where there is one, else platform.processor())."""
    try:
        model, isa = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        model, isa = "", ()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return CpuInfo(model or platform.processor() or "cpu", cores, isa)


def last_level_cache_bytes() -> int | None:
    """Size of CPU 0's largest cache from sysfs, None when unknown."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=None)


def _best_seconds(fn: Callable[[], object], repeats: int, min_seconds: float = 0.05) -> float:
    """Best of at least ``repeats`` timed calls, more while they total under ``min_seconds`` (at most 100x)."""
    fn()  # warm-up: page faults, BLAS thread start
    best, spent, n = float("inf"), 0.0, 0
    while n < repeats or (spent < min_seconds and n < 100 * repeats):
        started = time.perf_counter()
        fn()
        took = time.perf_counter() - started
        best, spent, n = min(best, took), spent + took, n + 1
    return best


def measure_bandwidth(nbytes: int | None = None, *, threads: int = 1, repeats: int = 5) -> float:
    """Memory read bandwidth in bytes/s: best time of ``threads`` threads taking the max of their slices of a
    float32 array (a SIMD read that is memory bound out of cache). Default size: 8x the last-level cache sysfs
    reports for CPU 0 (a VM may report less than the host has), 256 MiB to 1 GiB."""
    if nbytes is None:
        nbytes = min(max(8 * (last_level_cache_bytes() or 0), 256 << 20), 1 << 30)
    data = np.ones(nbytes // 4, dtype=np.float32)
    chunks = np.array_split(data, threads)
    with ThreadPoolExecutor(threads) as pool:  # numpy releases the GIL in the reduction
        seconds = _best_seconds(lambda: list(pool.map(np.max, chunks)), repeats)
    return data.nbytes / seconds


def measure_gemm_rate(shapes: Sequence[tuple[int, int, int]], *, repeats: int = 5) -> float:
    """float32 multiply-adds/s of numpy matmuls (m, k) x (k, n), one per shape (a shape may repeat: it is timed
    once and counted as often as it appears): total multiply-adds over total best times. numpy's BLAS threads
    are set at import (OPENBLAS_NUM_THREADS etc.; see ``measure_isolated``)."""
    rng = np.random.default_rng(0)
    seconds: dict[tuple[int, int, int], float] = {}
    for m, k, n in dict.fromkeys(shapes):
        a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        out = np.empty((m, n), np.float32)
        seconds[(m, k, n)] = _best_seconds(partial(np.matmul, a, b, out=out), repeats)
    return sum(m * k * n for m, k, n in shapes) / sum(seconds[s] for s in shapes)


@dataclass(frozen=True)
class DecoderDims:
    """The decoder dimensions the limits need."""

    d_model: int
    d_ff: int
    n_layers: int
    vocab: int
    final_logits_bias: bool = False
    pre_norm: bool = False

    @classmethod
    def from_model_config(cls, cfg: Mapping[str, Any]) -> DecoderDims:
        """From a ModelConfig as a dict (a checkpoint's config, or ``model_config`` of an ONNX manifest)."""
        return cls(
            d_model=int(cfg["d_model"]),
            d_ff=int(cfg["d_ff"]),
            n_layers=int(cfg["n_decoder_layers"]),
            vocab=int(cfg["tgt_vocab_size"]),
            final_logits_bias=bool(cfg.get("final_logits_bias", False)),
            pre_norm=cfg.get("norm_position") == "pre",
        )

    def gemm_shapes(self, rows: int) -> list[tuple[int, int, int]]:
        """The (m, k, n) matmuls of one decoder step over ``rows`` hypotheses: per layer self-attention q/k/v/o,
        cross-attention q/o (cross K/V come from the encoder graph, once per sentence) and the FFN; then the
        output projection."""
        d, f = self.d_model, self.d_ff
        return (
            [(rows, d, d)] * 6 * self.n_layers + [(rows, d, f), (rows, f, d)] * self.n_layers + [(rows, d, self.vocab)]
        )

    def step_macs(self, attention_positions: float = 0.0) -> int:
        """Multiply-adds per hypothesis per step: L (6 d^2 + 2 d d_ff) + d V, plus L 2 d p for attention scores and
        weighted sums over ``p`` keys on average (self ~ target length / 2, plus source length) when given."""
        d = self.d_model
        weights = self.n_layers * (6 * d * d + 2 * d * self.d_ff) + d * self.vocab
        return round(weights + self.n_layers * 2 * d * attention_positions)

    def step_weight_bytes(self, precision: str) -> int:
        """Bytes of weights one decoder step reads: the matmul weights of ``gemm_shapes`` at the precision's bytes,
        plus float32 biases and layer norms (13 d + d_ff a layer, the final norm of a pre-norm model, the logits
        bias) and one embedding row. The rest of the embedding table is not read."""
        d = self.d_model
        matmul = sum(k * n for _, k, n in self.gemm_shapes(1))
        vectors = self.n_layers * (13 * d + self.d_ff) + 2 * d * self.pre_norm + self.vocab * self.final_logits_bias + d
        return matmul * BYTES_PER_WEIGHT[precision] + 4 * vectors


@dataclass(frozen=True)
class Limit:
    tokens_per_s: float
    bound: str  # "memory" or "compute"


def limit_tokens_per_s(
    dims: DecoderDims,
    *,
    precision: str,
    beam: int,
    batch: int,
    bandwidth: float | None = None,
    gemm_rate: float | None = None,
    attention_positions: float = 0.0,
) -> Limit:
    """Target tokens/s no engine can beat on this decoder: ``batch`` tokens a step, a step lasting at least
    max(weight bytes / bandwidth [bytes/s], batch x beam x multiply-adds / gemm_rate [multiply-adds/s])."""
    if bandwidth is None and gemm_rate is None:
        raise ValueError("give the bandwidth, the GEMM rate or both")
    memory = dims.step_weight_bytes(precision) / bandwidth if bandwidth else 0.0
    compute = batch * beam * dims.step_macs(attention_positions) / gemm_rate if gemm_rate else 0.0
    return Limit(batch / max(memory, compute), "memory" if memory >= compute else "compute")


@dataclass(frozen=True)
class Rates:
    bandwidth: float  # bytes/s
    gemm_rate: dict[int, float]  # rows -> multiply-adds/s over the decoder's matmuls
    threads: int


def measure(dims: DecoderDims, rows: Sequence[int], threads: int, nbytes: int | None = None) -> Rates:
    """Bandwidth with ``threads`` threads and the GEMM rate of the decoder's matmul mix for each row count."""
    gemm = {r: measure_gemm_rate(dims.gemm_shapes(r)) for r in rows}
    return Rates(measure_bandwidth(nbytes, threads=threads), gemm, threads)


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def measure_isolated(dims: DecoderDims, rows: Sequence[int], threads: int, nbytes: int | None = None) -> Rates:
    """``measure`` in fresh processes whose BLAS uses 1 and then ``threads`` threads; the best of each rate (an
    engine given n threads may do as well as with one; small GEMMs can be slower threaded on a busy machine)."""
    runs = []
    for n in sorted({1, threads}):
        with _environ(dict.fromkeys(BLAS_THREAD_VARS, str(n))), mp.get_context("spawn").Pool(1) as pool:
            runs.append(pool.apply(measure, (dims, list(rows), n, nbytes)))
    best = max(runs, key=lambda r: r.bandwidth)
    gemm = {r: max(run.gemm_rate[r] for run in runs) for r in rows}
    return Rates(best.bandwidth, gemm, threads)
