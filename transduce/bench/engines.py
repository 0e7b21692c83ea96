"""``transduce bench engines``: this engine vs transformers, CTranslate2 and Optimum on the same weights and inputs."""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from transduce.bench import hardware
from transduce.bench.contenders import Job, Outcome, available, device_of, run_job
from transduce.bench.optimum_site import ensure_site, export_optimum, site_pool

OPTIMUM_SITE = "optimum-site"  # under the work directory: optimum-onnx and the transformers it needs

ENGINES = (
    "transduce-cpu-fp32",
    "transduce-cpu-fp32-full",
    "transduce-cpu-int8",
    "transduce-cpu-int8-full",
    "transduce-cuda-fp16",
    "transformers",
    "ctranslate2-fp32",
    "ctranslate2-int8",
    "ctranslate2-fp32-vmap",
    "ctranslate2-int8-vmap",
    "ctranslate2-cuda-fp16",
    "optimum-ort",
)
CONFIGS = ((1, 32), (4, 32), (1, 1))  # (beam_size, batch_size)


def source_sentences(n: int, work: Path) -> list[str]:
    """English verses of the Bible *dev* chapters (never test or holdout), deduplicated, first n."""
    return bible_pairs(n, work)[0]


def bible_pairs(n: int, work: Path) -> tuple[list[str], list[str]]:
    """``source_sentences`` with each verse's German verse, the reference."""
    from transduce.training.data import bible

    seen: dict[str, str] = {}
    for pair in bible.pairs(work):
        if pair.split == "dev":
            seen.setdefault(pair.en, pair.de)
    if len(seen) < n:
        raise ValueError(f"only {len(seen)} dev sentences available, asked for {n}")
    return list(seen)[:n], list(seen.values())[:n]


def prepare(checkpoint: Path, work: Path, engines: tuple[str, ...] = ENGINES) -> dict[str, str]:
    """Every engine's copy of the same weights: ONNX fp32/int8 (and fp16 with CUDA), a Marian directory, CTranslate2
    fp32/int8, and Optimum's ONNX export of that Marian directory (only when optimum-ort is asked for; made with its
    own packages)."""
    import shutil

    from transduce.engine.manifest import is_stale
    from transduce.engine.shortlist import sibling_table
    from transduce.export.onnx_export import ExportConfig, export_model
    from transduce.export.quantize import quantize_model_dir
    from transduce.interop.marian_export import export_marian

    paths = {
        "onnx": work / "onnx",
        "int8": work / "onnx-int8",
        "hf": work / "hf",
        "ct2": work / "ct2",
        "ct2int8": work / "ct2-int8",
        "optimum": work / "optimum",
        "fp16": work / "onnx-fp16",
    }
    shortlist = sibling_table(checkpoint)  # the CPU rows decode with it; the *-full rows without
    if is_stale(checkpoint, paths["onnx"], shortlist):
        for p in paths.values():
            if p.exists():
                shutil.rmtree(p)
        export_model(checkpoint, paths["onnx"], ExportConfig(shortlist=shortlist))
    if "transduce-cuda-fp16" in engines and not paths["fp16"].exists() and available("transduce-cuda-fp16") is None:
        export_model(checkpoint, paths["fp16"], ExportConfig(dtype="float16"))
    quantize_model_dir(paths["onnx"], paths["int8"])  # every run (seconds): never a stale quantisation
    if not paths["hf"].exists():
        export_marian(checkpoint, paths["hf"])
    try:
        import ctranslate2.converters as conv

        vmap = write_bench_vmap(checkpoint, shortlist, work / "vmap.txt") if shortlist else None
        for key, quant in (("ct2", None), ("ct2int8", "int8")):
            if not paths[key].exists():  # with the vmap, used only by the *-vmap rows (use_vmap=True)
                conv.TransformersConverter(str(paths["hf"])).convert(str(paths[key]), vmap=vmap, quantization=quant)
    except ImportError:
        pass
    if "optimum-ort" in engines and not paths["optimum"].exists() and available("optimum-ort") is None:
        try:
            with site_pool(ensure_site(work / OPTIMUM_SITE)) as pool:
                pool.apply(export_optimum, (paths["hf"], paths["optimum"]))
        except Exception as exc:  # noqa: BLE001 - the contender's rows then carry the error
            print(f"bench: optimum-ort unavailable: {exc}", file=sys.stderr)
    return {
        "transduce-cpu-fp32": str(paths["onnx"]),
        "transduce-cpu-int8": str(paths["int8"]),
        "transduce-cpu-int8-full": str(paths["int8"]),
        "transduce-cpu-fp32-full": str(paths["onnx"]),
        "transduce-cuda-fp16": str(paths["fp16"]),
        "transformers": str(paths["hf"]),
        "ctranslate2-fp32": str(paths["ct2"]),
        "ctranslate2-int8": str(paths["ct2int8"]),
        "ctranslate2-fp32-vmap": str(paths["ct2"]),
        "ctranslate2-int8-vmap": str(paths["ct2int8"]),
        "ctranslate2-cuda-fp16": str(paths["ct2"]),
        "optimum-ort": str(paths["optimum"]),
    }


def write_bench_vmap(checkpoint: Path, shortlist: Path, out: Path) -> str:
    """The checkpoint's shortlist for the bench direction (into German, or the model's one direction) as a
    CTranslate2 vocabulary map with the engine's default sizes."""
    from transduce.engine.shortlist import NO_TAG, load_table
    from transduce.interop.vmap import write_vmap
    from transduce.model.checkpoint import load_checkpoint

    tokenizer = load_checkpoint(checkpoint).tokenizer()
    tag = tokenizer.tag_id("de") if "de" in tokenizer.languages else None
    pieces = [tokenizer.sp.IdToPiece(i) for i in range(tokenizer.vocab_size)]
    write_vmap(load_table(shortlist)[0], NO_TAG if tag is None else tag, pieces, out)
    return str(out)


def summarize(
    engine: str, beam: int, batch: int, out: Outcome, ref: list[list[int]] | None, decode: Any
) -> dict[str, Any]:
    """One table row."""
    import sacrebleu

    row: dict[str, Any] = {"engine": engine, "beam": beam, "batch": batch}
    if out.error:
        return {**row, "error": out.error}
    total = sum(out.batch_seconds)
    row.update(
        target_tokens_per_s=round(tokens_per_s(out), 1),
        sentences_per_s=round(len(out.hyps) / total, 2),
        p50_batch_ms=round(float(np.percentile(out.batch_seconds, 50)) * 1000, 1),
        p95_batch_ms=round(float(np.percentile(out.batch_seconds, 95)) * 1000, 1),
        peak_rss_mb=round(out.peak_rss_mb),
        sentences=len(out.hyps),
        seconds=round(total, 2),
    )
    if ref is not None:
        row["identical_to_reference_pct"] = round(
            100 * np.mean([a == b for a, b in zip(out.hyps, ref, strict=True)]), 1
        )
        row["bleu_vs_reference"] = round(
            sacrebleu.corpus_bleu([decode(h) for h in out.hyps], [[decode(h) for h in ref]]).score, 1
        )
    return row


def rotated(engines: list[str], round_: int) -> list[str]:
    """The order of ``engines`` in round ``round_`` (from 0): the list rotated left by the round number."""
    k = round_ % len(engines) if engines else 0
    return engines[k:] + engines[:k]


def run(
    checkpoint: Path,
    *,
    n: int = 500,
    n_batch1: int = 100,
    threads: tuple[int, ...] = (1, 2),
    work: Path,
    out_dir: Path,
    engines: tuple[str, ...] = ENGINES,
    fixed_length: int | None = None,
    sentences: list[str] | None = None,
    bandwidth_bytes: int | None = None,
    rounds: int = 1,
) -> dict[str, Any]:
    """Benchmark every available engine on every config; write engines.json and engines.md.

    ``threads``: every engine runs every config with each of these thread counts; a row is its best.
    ``rounds``: every config runs all engines this many times, one engine after the other each round (each round
    starting one engine later, so no engine always runs first or right after the same one), and each engine keeps
    its best run per thread count: on a shared machine whose speed drifts, a slow spell then costs one engine one of
    its runs, not its row.
    ``sentences``: the source sentences (default: the first ``n`` English verses of the Bible dev chapters).
    ``bandwidth_bytes``: array size for the memory-bandwidth measurement (default: hardware.measure_bandwidth's)."""
    from transduce.model.checkpoint import load_checkpoint

    if not threads or min(threads) < 1:
        raise ValueError(f"threads must be positive thread counts, got {threads}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    work.mkdir(parents=True, exist_ok=True)
    paths = prepare(checkpoint, work, engines)
    ckpt = load_checkpoint(checkpoint)
    tokenizer = ckpt.tokenizer()
    langs = ckpt.config.languages
    target = "de" if "de" in langs else None
    sentences = source_sentences(n, work) if sentences is None else sentences[:n]
    sources = [tokenizer.encode_source(s, target) for s in sentences]
    pieces = [tokenizer.sp.IdToPiece(i) for i in range(tokenizer.vocab_size)]
    dims = hardware.DecoderDims.from_model_config(model_config(paths["transduce-cpu-fp32"], asdict(ckpt.config)))
    print("bench: measuring memory bandwidth and GEMM rates ...", file=sys.stderr)
    rates = hardware.measure_isolated(dims, sorted({b * k for k, b in CONFIGS if b > 1}), max(threads), bandwidth_bytes)
    rows: list[dict[str, Any]] = []
    ctx = mp.get_context("spawn")
    skipped = {e: why for e in engines if (why := available(e))}
    for beam, batch in CONFIGS:
        subset = sources if batch > 1 else sources[:n_batch1]
        ordered = sorted(engines, key=lambda e: e != "transformers")  # the reference first
        if "optimum-ort" in engines and "optimum-ort" not in skipped and not Path(paths["optimum-ort"]).exists():
            skipped["optimum-ort"] = "Optimum export failed"
        runnable = [e for e in ordered if e not in skipped]
        tries: dict[str, dict[int, Outcome]] = {e: {} for e in runnable}
        failed: dict[str, int] = dict.fromkeys(runnable, 0)
        for round_ in range(rounds):
            for engine in rotated(runnable, round_):
                for n_threads in threads:
                    job = Job(engine, paths[engine], subset, beam, batch, n_threads, fixed_length, pieces)
                    print(
                        f"bench: {engine} beam {beam} batch {batch} on {len(subset)} sentences, {n_threads} "
                        f"thread(s), round {round_ + 1} of {rounds} ...",
                        file=sys.stderr,
                    )
                    pool = site_pool(work / OPTIMUM_SITE) if engine == "optimum-ort" else ctx.Pool(1)
                    with pool:
                        outcome = pool.apply(run_job, (job,))
                    failed[engine] += bool(outcome.error)
                    tries[engine][n_threads] = faster(tries[engine].get(n_threads), outcome)
        ref: list[list[int]] | None = None
        for engine in ordered:
            if engine in skipped:
                rows.append({"engine": engine, "beam": beam, "batch": batch, "error": skipped[engine]})
                continue
            best_threads, outcome = best_of(tries[engine])
            if engine == "transformers" and not outcome.error:
                ref = outcome.hyps
            row = summarize(engine, beam, batch, outcome, ref, tokenizer.decode)
            if failed[engine] and not outcome.error:  # a run that failed is said, though another one counts
                row["failed_runs"] = failed[engine]
            if not outcome.error:
                row["threads"] = best_threads
                row["tokens_per_s_by_threads"] = {
                    t: round(tokens_per_s(o), 1) for t, o in tries[engine].items() if not o.error
                }
            rows.append(with_limit(row, dims, rates))
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "cpu": asdict(hardware.cpu_info()),
        "threads": threads,
        "rounds": rounds,
        "hardware": {
            "read_bandwidth_gb_s": round(rates.bandwidth / 1e9, 1),
            "gemm_gflop_s_by_rows": {r: round(2 * v / 1e9, 1) for r, v in rates.gemm_rate.items()},
            "decoder_macs_per_hypothesis_step": dims.step_macs(),
            "decoder_weight_bytes_per_step": {p: dims.step_weight_bytes(p) for p in ("fp32", "int8")},
            "method": "limit = batch / max(step weight bytes / bandwidth, batch x beam x step multiply-adds / GEMM "
            "rate), decoder only, no attention-score terms; batch-1 rows: bandwidth only; numpy float32 BLAS "
            "(not onnxruntime MLAS), the float32 rate for int8 rows too (see transduce/bench/hardware.py)",
        },
        "checkpoint": str(checkpoint),
        "model": asdict(ckpt.config) | {"params": ckpt.model.num_parameters()},
        "sentences": n,
        "batch1_sentences": n_batch1,
        "fixed_length": fixed_length,
        "settings": "length_penalty 0 everywhere; reference = transformers generate()",
        "rows": rows,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "engines.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out_dir / "engines.md").write_text(markdown(result))
    return result


def faster(earlier: Outcome | None, new: Outcome) -> Outcome:
    """The faster of two runs of one engine, config and thread count (a finished run over a failed one)."""
    return new if earlier is None else best_of({0: earlier, 1: new})[1]


def best_of(tries: dict[int, Outcome]) -> tuple[int, Outcome]:
    """The thread count and outcome with the most target tokens per second (an error only when all failed)."""
    ok = {t: o for t, o in tries.items() if not o.error and o.batch_seconds}
    if not ok:
        return next(iter(tries.items()))
    return max(ok.items(), key=lambda item: tokens_per_s(item[1]))


def tokens_per_s(out: Outcome) -> float:
    """Target tokens per second of a finished outcome, eos counted (every engine generates it)."""
    return sum(len(h) + 1 for h in out.hyps) / sum(out.batch_seconds)


def machine() -> str:
    """CPU model, core count, OS and the GEMM-relevant ISA extensions of this machine."""
    return hardware.cpu_info().describe()


def model_config(model_dir: str, fallback: dict[str, Any]) -> dict[str, Any]:
    """``model_config`` of an exported model's manifest (``fallback``, the checkpoint's, when it has none)."""
    from transduce.engine.manifest import load_manifest

    config = load_manifest(model_dir, check_files=False).raw.get("model_config")
    return dict(config) if isinstance(config, dict) else fallback


def with_limit(row: dict[str, Any], dims: hardware.DecoderDims, rates: hardware.Rates) -> dict[str, Any]:
    """``row`` with the hardware limit of its config (CPU engines; batch 1: bandwidth only) and measured / limit."""
    if device_of(row["engine"]) != "cpu":
        return row
    beam, batch = row["beam"], row["batch"]
    limit = hardware.limit_tokens_per_s(
        dims,
        precision="int8" if "int8" in row["engine"] else "fp32",
        beam=beam,
        batch=batch,
        bandwidth=rates.bandwidth,
        gemm_rate=rates.gemm_rate.get(batch * beam) if batch > 1 else None,
    )
    row.update(limit_tokens_per_s=round(limit.tokens_per_s, 1), limit_bound=limit.bound)
    if "target_tokens_per_s" in row:
        row["of_limit"] = round(row["target_tokens_per_s"] / limit.tokens_per_s, 3)
    return row


def markdown(result: dict[str, Any]) -> str:
    """The results table."""
    hw = result.get("hardware")  # results written before the limit column have none
    limits = (
        f" Limit: measured read bandwidth {hw['read_bandwidth_gb_s']} GB/s, float32 GEMM "
        + ", ".join(f"{g} GFLOP/s at {r} rows" for r, g in hw["gemm_gflop_s_by_rows"].items())
        + f"; {hw['method']}."
        if hw
        else ""
    )
    rounds = int(result.get("rounds", 1))
    interleaved = f"{rounds} rounds (all engines in turn, each round starting one later), and of " if rounds > 1 else ""
    lines = [
        f"Engines on {result['machine']}, best of {interleaved}{threads_text(result['threads'])} threads each "
        f"(column threads), {result['date']}; "
        f"{result['sentences']} sentences ({result['batch1_sentences']} at batch 1); {result['settings']}.{limits}",
        "",
        "| engine | beam | batch | threads | target tok/s | limit tok/s | of limit | sent/s | p50 batch ms | "
        "p95 batch ms | peak RSS MB | identical % | BLEU vs ref |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        limit = f"{r['limit_tokens_per_s']} ({r['limit_bound']})" if "limit_tokens_per_s" in r else "–"
        if "error" in r:
            lines.append(
                f"| {r['engine']} | {r['beam']} | {r['batch']} | – | – | {limit} | – | – | – | – | – | – | "
                f"{r['error']} |"
            )
        else:
            lines.append(
                f"| {r['engine']} | {r['beam']} | {r['batch']} | {r.get('threads', '–')} | "
                f"{r['target_tokens_per_s']} | {limit} | "
                f"{r.get('of_limit', '–')} | "
                f"{r['sentences_per_s']} | {r['p50_batch_ms']} | {r['p95_batch_ms']} | {r['peak_rss_mb']} | "
                f"{r.get('identical_to_reference_pct', '–')} | {r.get('bleu_vs_reference', '–')} |"
            )
    return "\n".join(lines) + "\n"


def threads_text(threads: Any) -> str:
    """ "1, 2" for (1, 2); an older result's single count as is."""
    return ", ".join(str(t) for t in threads) if isinstance(threads, list | tuple) else str(threads)
