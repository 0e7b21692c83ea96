"""``transduce bench cuda``: the CUDA path measured on a GPU machine (a benchmark, not a test).

Exports the checkpoint (float16 for CUDA, float32 with the shortlist for the CPU rows), then on the same machine and
the same source ids: this engine on CUDA (float16 and float32 exports) and on the CPU (float32, a few thread counts),
greedy batch 32, beam 4 batch 32 and greedy batch 1, as ``transduce bench engines`` runs them (length penalty 0,
cap = longest source + 50, each run in a fresh process); how often the outputs equal those of the CPU over the whole
vocabulary, and each one's BLEU against the references; and the step scheduler on CUDA against the engine alone,
clients submitting one sentence each. Each section is written to ``cuda.json`` and ``cuda.md`` as soon as it ends,
so a section that fails or a run cut short still leaves the others."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from transduce.bench.contenders import Job, Outcome, run_job
from transduce.bench.engines import CONFIGS, tokens_per_s

CLIENTS = (16, 64)


def gpu_name() -> str:
    """The GPU as nvidia-smi names it, with its driver and memory ("" without nvidia-smi)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def read_pairs(path: Path, n: int) -> tuple[list[str], list[str]]:
    """Source and reference sentences from a tab-separated file (source TAB reference per line), the first n."""
    lines = [(k, line.split("\t")) for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)]
    rows = [(k, cells) for k, cells in lines if len(cells) > 1][:n]
    for k, cells in rows:  # ("too many values to unpack (expected 2)" was the message)
        if len(cells) != 2:
            raise ValueError(f"{path}: line {k} has {len(cells)} columns: write source TAB reference, one pair a line")
    return [cells[0] for _, cells in rows], [cells[1] for _, cells in rows]


Key = tuple[str, int, int]  # (label, beam, batch) of a run


def run_rows(
    ctx: Any, rows: list[tuple[str, str, str, int]], sources: list[list[int]], n_batch1: int
) -> dict[Key, Outcome]:
    """(label, engine, model dir, threads) x CONFIGS, each in a fresh process."""
    out: dict[Key, Outcome] = {}
    for beam, batch in CONFIGS:
        subset = sources if batch > 1 else sources[:n_batch1]
        for label, engine, path, threads in rows:
            print(f"cuda bench: {label} beam {beam} batch {batch}, {threads} thread(s) ...", file=sys.stderr)
            with ctx.Pool(1) as pool:
                out[label, beam, batch] = pool.apply(run_job, (Job(engine, path, subset, beam, batch, threads),))
    return out


def summary(runs: dict[Key, Outcome], refs: list[str], decode: Any) -> list[dict[str, Any]]:
    """One row per run: tokens/s, sentences/s, peak RSS, BLEU vs references, and how many outputs equal those of the
    first CPU float32 full-vocabulary row (the exact reference: CUDA decodes over the whole vocabulary)."""
    import sacrebleu

    rows = []
    for (label, beam, batch), o in runs.items():
        row: dict[str, Any] = {"engine": label, "beam": beam, "batch": batch}
        if o.error:
            rows.append(row | {"error": o.error})
            continue
        cpu = next((v for k, v in runs.items() if k[0].startswith("cpu-fp32-full") and k[1:] == (beam, batch)), None)
        hyps = [decode(h) for h in o.hyps]
        row.update(
            target_tokens_per_s=round(tokens_per_s(o), 1),
            sentences_per_s=round(len(o.hyps) / sum(o.batch_seconds), 2),
            peak_rss_mb=round(o.peak_rss_mb),
            bleu_vs_reference=round(sacrebleu.corpus_bleu(hyps, [refs[: len(hyps)]]).score, 2),
        )
        if cpu is not None and not cpu.error:
            row["same_as_cpu_fp32_full"] = f"{sum(a == b for a, b in zip(o.hyps, cpu.hyps, strict=True))}/{len(o.hyps)}"
        rows.append(row)
    return rows


async def _clients(scheduler: Any, texts: list[str], clients: int, options: Any, got: dict[int, str]) -> float:
    """Seconds for ``clients`` concurrent clients to translate ``texts``, one sentence per request (into ``got``)."""
    todo = list(enumerate(texts))

    async def client() -> None:
        while todo:
            i, text = todo.pop()
            done = await scheduler.submit([text], source_lang="en", target_lang="de", options=options)
            got[i] = done[0].result.hypotheses[0]

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - started


def scheduler_rows(model: str, texts: list[str], device: str = "cuda") -> list[dict[str, Any]]:
    """Verses/s of the step scheduler (one sentence per request) over the engine alone (batches of 32), and how many
    of its outputs equal the engine alone's."""
    from transduce.engine.options import DecodeOptions
    from transduce.engine.scheduler import StepScheduler
    from transduce.engine.translator import Translator

    translator = Translator(model, device=device, strict_device=True)
    rows = []
    for beam in (1, 4):
        options = DecodeOptions(beam_size=beam, no_repeat_ngram_size=5)
        translator.translate(texts[:8], source_lang="en", target_lang="de", options=options)  # warm-up
        started = time.perf_counter()
        reference = translator.translate(texts, source_lang="en", target_lang="de", options=options)
        alone = len(texts) / (time.perf_counter() - started)
        n = len(texts)
        for clients in CLIENTS:
            got: dict[int, str] = {}

            async def serve(
                options: DecodeOptions = options, clients: int = clients, got: dict[int, str] = got
            ) -> float:
                scheduler = StepScheduler(translator)
                await scheduler.start()
                try:
                    await _clients(scheduler, texts[:16], clients, options, {})  # warm-up
                    return await _clients(scheduler, texts, clients, options, got)
                finally:
                    await scheduler.stop()

            step = len(texts) / asyncio.run(serve())
            rows.append(
                {
                    "beam": beam,
                    "clients": clients,
                    "engine_alone_verses_per_s": round(alone, 1),
                    "step_scheduler_verses_per_s": round(step, 1),
                    "ratio": round(step / alone, 2),
                    "same_as_engine_alone": f"{sum(got[i] == r.hypotheses[0] for i, r in enumerate(reference))}/{n}",
                }
            )
            print(f"cuda bench: scheduler {rows[-1]}", file=sys.stderr)
    return rows


def markdown(result: dict[str, Any]) -> str:
    """cuda.json as the tables of cuda.md."""
    lines = [
        f"CUDA path on {result['gpu']}; host {result['cpu']}; onnxruntime {result['onnxruntime']}; {result['date']}",
        "",
        f"Settings: {result['settings']}.",
        "",
        "| engine | beam | batch | target tok/s | sent/s | peak RSS MB | same as CPU fp32 full vocab | BLEU vs ref |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result.get("rows", []):
        cells = [r.get(k, "") for k in ("target_tokens_per_s", "sentences_per_s", "peak_rss_mb")]
        cells += [r.get("same_as_cpu_fp32_full", ""), r.get("bleu_vs_reference", r.get("error", ""))]
        lines.append(f"| {r['engine']} | {r['beam']} | {r['batch']} | " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "Step scheduler on CUDA (float16), one sentence per request, vs the engine alone (batches of 32):",
        "",
    ]
    rows = result.get("scheduler", [])
    if isinstance(rows, str):
        return "\n".join([*lines, rows, ""])
    lines += [
        "| beam | clients | engine alone verses/s | step scheduler verses/s | ratio | same as engine alone |",
        "|---|---|---|---|---|---|",
    ]
    keys = ("beam", "clients", "engine_alone_verses_per_s", "step_scheduler_verses_per_s", "ratio")
    for r in rows:
        lines.append("| " + " | ".join(str(r[k]) for k in (*keys, "same_as_engine_alone")) + " |")
    return "\n".join([*lines, ""])


def run(
    checkpoint: Path,
    pairs: tuple[list[str], list[str]],
    *,
    n_batch1: int = 100,
    threads: tuple[int, ...] = (4, 16),
    work: Path,
    out_dir: Path,
    scheduler_device: str = "cuda",
) -> dict[str, Any]:
    """Every section in turn (see the module docstring); ``pairs``: sources and their references. ``threads``: the
    CPU rows' thread counts. ``scheduler_device="cpu"``: the scheduler section on the CPU (a dry run without a GPU)."""
    import onnxruntime as ort

    from transduce.bench.hardware import cpu_info
    from transduce.engine.shortlist import sibling_table
    from transduce.export.onnx_export import ExportConfig, export_model
    from transduce.model.checkpoint import load_checkpoint

    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": gpu_name(),
        "cpu": cpu_info().describe(),
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "settings": "length_penalty 0, cap = longest source of the batch + 50, each run in a fresh process; "
        "scheduler rows: the service's decode options (length penalty 0.6, no_repeat_ngram_size 5)",
    }

    def save() -> None:
        (out_dir / "cuda.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        (out_dir / "cuda.md").write_text(markdown(result))

    started = time.perf_counter()
    fp16, fp32 = work / "cuda-fp16", work / "cuda-fp32"
    export_model(checkpoint, fp16, ExportConfig(dtype="float16"))
    export_model(checkpoint, fp32, ExportConfig(shortlist=sibling_table(checkpoint)))
    result["export_seconds"] = round(time.perf_counter() - started, 1)
    save()

    tokenizer = load_checkpoint(checkpoint).tokenizer()
    texts, refs = pairs
    target = "de" if "de" in tokenizer.languages else None
    sources = [tokenizer.encode_source(t, target) for t in texts]
    rows = [("cuda-fp16", "transduce-cuda-fp16", str(fp16), 1), ("cuda-fp32", "transduce-cuda-fp16", str(fp32), 1)]
    rows += [(f"cpu-fp32-full-{t}t", "transduce-cpu-fp32-full", str(fp32), t) for t in threads]
    rows += [(f"cpu-fp32-{t}t", "transduce-cpu-fp32", str(fp32), t) for t in threads]  # with the shortlist
    runs = run_rows(mp.get_context("spawn"), rows, sources, n_batch1)
    result["rows"] = summary(runs, refs, tokenizer.decode)
    save()
    try:
        result["scheduler"] = scheduler_rows(str(fp16 if scheduler_device == "cuda" else fp32), texts, scheduler_device)
    except Exception as exc:  # noqa: BLE001 - a benchmark section that fails is reported, the rest stands
        result["scheduler"] = f"{type(exc).__name__}: {exc}"
    save()
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m transduce.bench.cuda`` (``transduce bench cuda`` is the same with the Bible pairs by default)."""
    parser = argparse.ArgumentParser(prog="python -m transduce.bench.cuda", description=__doc__)
    parser.add_argument("--checkpoint", default="transduce/weights/default/checkpoint.pt")
    parser.add_argument("--pairs", required=True, help="source TAB reference per line")
    parser.add_argument("--work", default="/tmp/transduce-cuda-bench", help="exports go here")
    parser.add_argument("--out", required=True, help="directory for cuda.json and cuda.md")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--batch1-sentences", type=int, default=100)
    parser.add_argument("--cpu-threads", default="4,16", help="thread counts of the CPU float32 rows")
    parser.add_argument("--scheduler-device", default="cuda", help="where the scheduler section runs (cpu: a dry run)")
    args = parser.parse_args(argv)
    result = run(
        Path(args.checkpoint),
        read_pairs(Path(args.pairs), args.sentences),
        n_batch1=args.batch1_sentences,
        threads=tuple(int(t) for t in args.cpu_threads.split(",")),
        work=Path(args.work),
        out_dir=Path(args.out),
        scheduler_device=args.scheduler_device,
    )
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
