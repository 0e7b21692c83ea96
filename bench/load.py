"""``transduce bench load``: the real service under a bounded async load, with dynamic batching on and off."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.engines import machine, source_sentences


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _counters(url: str) -> dict[str, float]:
    """Generated tokens and batch-size sum/count from /metrics (deltas give per-level figures)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for name in ("transduce_generated_tokens_total", "transduce_batch_size_sum", "transduce_batch_size_count"):
        match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        out[name] = float(match.group(1)) if match else 0.0
    return out


def _cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of the server process and of its main thread (the event loop), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")

    def read(path: str) -> float:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime

    try:
        return {"server": read(f"/proc/{pid}/stat"), "event_loop": read(f"/proc/{pid}/task/{pid}/stat")}
    except OSError:  # not Linux: the columns stay empty
        return {}


async def _drive(url: str, sentences: list[str], concurrency: int, requests: int, beam: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    queue = list(range(requests))

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while queue:
            i = queue.pop()
            started = time.perf_counter()
            r = await client.post("/translate", json={"q": sentences[i % len(sentences)], "source": "en",
                                                      "target": "de", "beam_size": beam})
            latencies.append((time.perf_counter() - started) * 1000)
            errors += r.status_code != 200

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"requests": requests, "errors": errors, "seconds": round(elapsed, 2),
            "sentences_per_s": round(requests / elapsed, 2),
            **{f"p{q}_ms": round(float(np.percentile(latencies, q)), 1) for q in (50, 95, 99)}}


def serve(model_dir: str, batching: bool, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    """`transduce serve` as a subprocess on loopback; batching off means max_batch_size=1, no waiting."""
    port = _free_port()
    env = {**os.environ, "TRANSDUCE_MODEL_DIR": model_dir, "TRANSDUCE_PORT": str(port), "TRANSDUCE_HOST": "127.0.0.1",
           "TRANSDUCE_MAX_BATCH_SIZE": "32" if batching else "1", "TRANSDUCE_MAX_WAIT_MS": "5" if batching else "0",
           "TRANSDUCE_MAX_QUEUE_ITEMS": "100000", "TRANSDUCE_REQUEST_TIMEOUT_S": "600",
           "TRANSDUCE_INTRA_THREADS": str(threads), "TRANSDUCE_LOG_JSON": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "transduce", "serve"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the service did not become ready")


def offline_throughput(model_dir: str, sentences: list[str], beam: int, threads: int) -> float:
    """Sentences/s of the engine alone on the same sentences (batch 32, sorted by length)."""
    from engine.options import DecodeOptions
    from engine.translator import Translator

    translator = Translator(model_dir, device="auto", intra_threads=threads)
    translator.translate(sentences[:4], source_lang="en", target_lang="de")
    started = time.perf_counter()
    translator.translate(sentences, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=beam))
    return len(sentences) / (time.perf_counter() - started)


def run(model_dir: str, *, concurrency: tuple[int, ...] = (1, 4, 16, 64), requests: int = 256, beam: int = 4,
        threads: int = 2, work: Path, out_dir: Path, sentences: list[str] | None = None) -> dict[str, Any]:
    """Both modes at every concurrency; load.json + load.md. ``sentences``: one per request, cycled (default: English
    verses of the Bible dev chapters)."""
    if sentences is None:
        sentences = source_sentences(max(requests, 64), work)[:requests]
    rows = []
    for batching in (True, False):
        proc, url = serve(model_dir, batching, threads)
        try:
            for c in concurrency:
                print(f"bench load: batching {'on' if batching else 'off'}, concurrency {c} ...", file=sys.stderr)
                before, cpu_before, client_before = _counters(url), _cpu_seconds(proc.pid), time.process_time()
                row = asyncio.run(_drive(url, sentences, c, requests, beam))
                client_cpu = time.process_time() - client_before
                after, cpu_after = _counters(url), _cpu_seconds(proc.pid)
                # where the 2 cores went: the load generator itself, the service's event loop, the whole service
                row["cpu_ms_per_request"] = {"client": round(1000 * client_cpu / requests, 2)} | {
                    k: round(1000 * (cpu_after[k] - cpu_before[k]) / requests, 2) for k in ("event_loop", "server")
                    if k in cpu_after}
                delta = {k: after[k] - before[k] for k in after}
                row["target_tokens_per_s"] = round(delta["transduce_generated_tokens_total"] / row["seconds"], 1)
                batches = max(delta["transduce_batch_size_count"], 1.0)
                rows.append({"batching": batching, "concurrency": c, **row,
                             "mean_batch_size": round(delta["transduce_batch_size_sum"] / batches, 2)})
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    offline = offline_throughput(model_dir, sentences, beam, threads)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "beam": beam,
              "threads": threads, "requests_per_level": requests, "offline_sentences_per_s": round(offline, 2),
              "rows": rows}
    for c in concurrency:
        on = next(r for r in rows if r["batching"] and r["concurrency"] == c)
        off = next(r for r in rows if not r["batching"] and r["concurrency"] == c)
        on["speedup_vs_no_batching"] = round(on["sentences_per_s"] / off["sentences_per_s"], 2)
        on["fraction_of_offline"] = round(on["sentences_per_s"] / offline, 2)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "load.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"Service load on {result['machine']}, beam {beam}, {threads} threads, {requests} requests per level, "
             f"{result['date']}; engine alone: {result['offline_sentences_per_s']} sentences/s.", "",
             "| batching | clients | sent/s | target tok/s | p50 ms | p95 ms | p99 ms | mean batch | errors | "
             "vs. no batching | vs. offline | CPU ms/request: client, service loop, service |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'on' if r['batching'] else 'off'} | {r['concurrency']} | {r['sentences_per_s']} | "
                     f"{r['target_tokens_per_s']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | "
                     f"{r['mean_batch_size']} | {r['errors']} | {r.get('speedup_vs_no_batching', '')} | "
                     f"{r.get('fraction_of_offline', '')} | {', '.join(map(str, r['cpu_ms_per_request'].values()))} |")
    (out_dir / "load.md").write_text("\n".join(lines) + "\n")
    return result
