"""``transduce bench load``: the real service under a bounded async load, in five modes: step-level scheduling
(sentences join the running batch between decoder steps), the same with one worker per engine replica of one thread,
static batching (a batch runs to completion), the same with engine replicas, and batching off (one sentence at a
time); on a uniform workload and on a mixed one (80 % short requests, 20 % long
ones, beams mixed), where the short requests' own latency is reported too, and on the scheduler issue's hostile case:
three heavy requests (the longest sentences, up to 4,800 characters each, twice the beam) at once, then requests of
one short sentence every 80 ms behind them.

Closed loop: N clients, each sending its next request when the last one is answered (the server is saturated from 4
clients on, so latency mostly measures the queue). Open loop: requests of the mixed workload arrive at a fixed mean
rate (Poisson, seeded), as independent users' do, at fractions of the engine's own capacity; latency counts from the
scheduled arrival, so it includes any time the request waited for the server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from transduce.bench.engines import machine, source_sentences
from transduce.bench.http_client import Client, HttpError


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
    """CPU seconds of the server process (user + system, in clock ticks, exited threads included) and of its main
    thread, the event loop (from schedstat in nanoseconds: a few requests' worth of loop work is under one tick)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state first
        server = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        loop = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9  # ns on a CPU
    except OSError:  # not Linux: the columns stay empty
        return {}
    return {"server": server, "event_loop": loop}


# replicas: static batching, one engine replica per thread; step-replicas: the step scheduler, one worker per thread
MODES = ("step", "step-replicas", "static", "replicas", "off")
REPLICATED = ("replicas", "step-replicas")
# auto: the service as it starts with none of these settings (its own scheduler, engine replicas and threads), e.g.
# to measure its defaults on a GPU machine; not in the default run
CHOICES = (*MODES, "auto")
SET_BY_MODE = ("TRANSDUCE_SCHEDULER", "TRANSDUCE_INTRA_THREADS", "TRANSDUCE_ENGINE_REPLICAS")


@dataclass(frozen=True)
class Request:
    """One request of a workload."""

    text: str
    beam: int
    short: bool


def workload(sentences: list[str], requests: int, beam: int, mixed: bool) -> list[Request]:
    """``requests`` requests: one sentence each at ``beam`` (uniform), or mixed: 4 in 5 short (one sentence, beam 1
    or ``beam`` alternately) and 1 in 5 long (five sentences, one per line, beam ``beam``)."""
    if not mixed:
        return [Request(sentences[i % len(sentences)], beam, True) for i in range(requests)]
    out = []
    for i in range(requests):
        if i % 5 == 4:
            # one verse per line: joined by spaces, a verse ending without a full stop ran into the next one, and
            # such a run can pass the service's sentence limit (a 400)
            text = "\n".join(sentences[(i + j) % len(sentences)] for j in range(5))
            out.append(Request(text, beam, False))
        else:
            out.append(Request(sentences[i % len(sentences)], 1 if i % 2 else beam, True))
    return out


HEAVY_CHARS = 4800  # a heavy request's text, under the service's default max_chars (5000)
HEAVY, SHORTS = 3, 24  # heavy requests, and the short ones sent behind them


def heavy_beam(beam: int) -> int:
    """The heavy requests' beam: twice the workload's, at most 8 (the service's default max_beam_size)."""
    return min(2 * beam, 8)


def heavy_workload(
    sentences: list[str], beam: int, heavy: int = HEAVY, shorts: int = SHORTS
) -> tuple[list[Request], list[float]]:
    """The scheduler issue's hostile case: ``heavy`` requests of the longest sentences, one per line, up to
    HEAVY_CHARS characters each, at twice ``beam`` (8 at most), sent at once; then ``shorts`` requests of one short
    sentence (the shortest quarter of ``sentences``, in turn; the issue's example was "Hello world.") at ``beam``,
    one every 80 ms from 0.5 s on, while the heavy ones decode. Returns the requests and when each is sent (seconds
    from the start)."""
    longest = sorted(sentences, key=len, reverse=True)
    load: list[Request] = []
    for h in range(heavy):
        lines: list[str] = []
        size = -1  # the text's length: the lines and a newline between each two
        for text in longest[h::heavy]:  # each heavy request its own sentences
            if size + 1 + len(text) <= HEAVY_CHARS:
                lines.append(text)
                size += 1 + len(text)
        load.append(Request("\n".join(lines), heavy_beam(beam), False))
    shortest = sorted(sentences, key=len)[: max(1, len(sentences) // 4)]
    load += [Request(shortest[i % len(shortest)], beam, True) for i in range(shorts)]
    return load, [0.0] * heavy + [0.5 + 0.08 * i for i in range(shorts)]


async def _drive(url: str, load: list[Request], concurrency: int) -> dict[str, Any]:
    """Closed loop: ``concurrency`` clients send the requests one after another."""
    latencies: list[tuple[bool, float]] = []
    errors = 0
    queue = list(range(len(load)))

    async def worker(client: Client) -> None:
        nonlocal errors
        while queue:
            request = load[queue.pop()]
            started = time.perf_counter()
            errors += not await _send(client, request)
            latencies.append((request.short, (time.perf_counter() - started) * 1000))

    async with Client(url, timeout=600) as client:  # up to a connection per client, kept alive
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return _summary(load, latencies, errors, elapsed)


async def _drive_open(url: str, load: list[Request], rate: float, seed: int = 0) -> dict[str, Any]:
    """Open loop: request i is sent at the i-th arrival of a Poisson process of ``rate`` per second, whatever the
    server is doing; its latency counts from that arrival."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, len(load)))
    return await _drive_at(url, load, [float(a) for a in arrivals])


async def _drive_at(url: str, load: list[Request], arrivals: list[float]) -> dict[str, Any]:
    """Request i is sent ``arrivals[i]`` seconds after the start, whatever the server is doing; its latency counts
    from then."""
    latencies: list[tuple[bool, float]] = []
    errors = 0

    async def one(client: Client, request: Request, at: float, start: float) -> None:
        nonlocal errors
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        errors += not await _send(client, request)
        latencies.append((request.short, (time.perf_counter() - start - at) * 1000))

    async with Client(url, timeout=600) as client:
        started = time.perf_counter()
        await asyncio.gather(*(one(client, r, a, started) for r, a in zip(load, arrivals, strict=True)))
        elapsed = time.perf_counter() - started
    return _summary(load, latencies, errors, elapsed)


async def _send(client: Client, request: Request) -> bool:
    """Whether the request was answered 200 (a transport error, e.g. a timeout, counts as an error)."""
    body = {"q": request.text, "source": "en", "target": "de", "beam_size": request.beam}
    try:
        return (await client.post_json("/translate", body)).status == 200
    except (HttpError, OSError):  # OSError: refused, reset, and TimeoutError
        return False


def _summary(load: list[Request], latencies: list[tuple[bool, float]], errors: int, elapsed: float) -> dict[str, Any]:
    every = [ms for _, ms in latencies]
    short = [ms for is_short, ms in latencies if is_short]
    return {
        "requests": len(load),
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(load) / elapsed, 2),
        **{f"p{q}_ms": round(float(np.percentile(every, q)), 1) for q in (50, 95, 99)},
        "short_p50_ms": round(float(np.percentile(short, 50)), 1),
        "short_p99_ms": round(float(np.percentile(short, 99)), 1),
    }


NOT_INHERITED = ("TRANSDUCE_MODELS",)  # would serve the models it names instead of the one measured
PATH_SETTINGS = ("TRANSDUCE_GLOSSARY_FILE", "TRANSDUCE_FILES_DIR")  # relative to where the bench runs, not its servers
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds transduce/


def _bench_settings(model_dir: str, mode: str, threads: int, port: int) -> dict[str, str]:
    """The settings the bench gives its server in ``mode``."""
    settings = {
        "TRANSDUCE_MODEL_DIR": str(Path(model_dir).resolve()) if model_dir else "",
        "TRANSDUCE_PORT": str(port),
        "TRANSDUCE_HOST": "127.0.0.1",
        "TRANSDUCE_MAX_BATCH_SIZE": "1" if mode == "off" else "32",
        "TRANSDUCE_MAX_WAIT_MS": "0" if mode == "off" else "5",
        "TRANSDUCE_MAX_QUEUE_ITEMS": "100000",
        "TRANSDUCE_REQUEST_TIMEOUT_S": "600",
        "TRANSDUCE_LOG_JSON": "false",
        "TRANSDUCE_CACHE_SIZE": "0",  # the workload repeats its sentences: measure decoding, not cache hits
    }
    if mode != "auto":
        settings |= {
            "TRANSDUCE_SCHEDULER": "step" if mode.startswith("step") else "static",
            "TRANSDUCE_INTRA_THREADS": "1" if mode in REPLICATED else str(threads),
            "TRANSDUCE_ENGINE_REPLICAS": str(threads) if mode in REPLICATED else "1",
        }
    return settings


# what no server of the bench takes from its environment, in any mode: the bench's own settings, the mode's three
# (set by every mode but auto, which leaves them to the service) and NOT_INHERITED
_NOT_PASSED_ON = frozenset((*_bench_settings("", "static", 1, 0), *SET_BY_MODE, *NOT_INHERITED))


def inherited_settings() -> dict[str, str]:
    """The service settings (``TRANSDUCE_*``) the bench's servers take from this process's environment in every mode,
    e.g. ``TRANSDUCE_DEVICE=cuda``; reported with the results, since they change what is measured."""
    from transduce.service.config import Settings

    fields = {f"TRANSDUCE_{name}".upper() for name in Settings.model_fields}
    return {k: v for k, v in sorted(os.environ.items()) if k.upper() in fields - _NOT_PASSED_ON}


def server_env(model_dir: str, mode: str, threads: int, port: int) -> dict[str, str]:
    """The environment `transduce serve` runs in for ``mode`` (``CHOICES``): this process's, with the bench's limits
    (no cache, no queue limit, 600 s timeouts) and the mode's scheduler, replicas and threads; under ``auto``, none
    of those three, even if this process's environment sets them. ``TRANSDUCE_MODELS`` is not passed on, and the
    package stays importable from the server's own working directory (``serve``: one without a ``.env``)."""
    env = {  # names as the service reads them, in any case; relative paths as meant where the bench runs
        k: os.path.abspath(v) if k.upper() in PATH_SETTINGS and v else v
        for k, v in os.environ.items()
        if k.upper() not in _NOT_PASSED_ON
    }
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if (PACKAGE_ROOT / "pyproject.toml").is_file():  # a source checkout, not an installed package
        paths.insert(0, str(PACKAGE_ROOT))
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env | _bench_settings(model_dir, mode, threads, port)


_workdir: tempfile.TemporaryDirectory[str] | None = None


def _server_workdir() -> str:
    """An empty directory the bench's servers run in (removed when this process exits): a ``.env`` file where the
    bench was started would otherwise set the service's settings without a word, ``auto``'s three included."""
    global _workdir
    if _workdir is None:
        _workdir = tempfile.TemporaryDirectory(prefix="transduce-bench-")
    return _workdir.name


def serve(model_dir: str, mode: str, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    """`transduce serve` as a subprocess on loopback in ``mode`` (step, step-replicas: step with ``threads`` engine
    replicas of one thread each, static, replicas: static with ``threads`` engine replicas of one thread each, off:
    static with batches of 1, or auto: the service's own choices; ``server_env``), in an empty working directory."""
    port = _free_port()
    env = server_env(model_dir, mode, threads, port)
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:  # the service's log: its last line says why it stopped before it was ready
        command = [sys.executable, "-m", "transduce", "serve"]
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=_server_workdir())
        for _ in range(600):
            if proc.poll() is not None:
                break
            try:
                if httpx.get(url + "/health/ready", timeout=1).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.kill()
        proc.wait()
        log.seek(0)
        last = (log.read().decode(errors="replace").strip().splitlines() or ["(nothing logged)"])[-1]
    raise RuntimeError(f"the service ({mode}) did not become ready: {last}")


def offline_throughput(model_dir: str, sentences: list[str], beam: int, threads: int) -> float:
    """Sentences/s of the engine alone on the same sentences (batch 32, sorted by length)."""
    from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
    from transduce.engine.translator import Translator

    translator = Translator(model_dir, device="auto", intra_threads=threads, shared_pool=True)
    translator.translate(sentences[:4], source_lang="en", target_lang="de")
    served = DecodeOptions(beam_size=beam, no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE)  # as the service decodes
    started = time.perf_counter()
    translator.translate(sentences, source_lang="en", target_lang="de", options=served)
    return len(sentences) / (time.perf_counter() - started)


def _level(
    url: str,
    pid: int,
    load: list[Request],
    concurrency: int | None,
    rate: float | None,
    arrivals: list[float] | None = None,
) -> dict[str, Any]:
    """One level (``concurrency`` clients, open-loop arrivals at ``rate`` per second, or each request at its own
    time in ``arrivals``): the load, the service's counters and where the CPU went."""
    before, cpu_before, client_before = _counters(url), _cpu_seconds(pid), time.process_time()
    if arrivals is not None:
        row = asyncio.run(_drive_at(url, load, arrivals))
    elif rate is not None:
        row = asyncio.run(_drive_open(url, load, rate))
    else:
        assert concurrency is not None
        row = asyncio.run(_drive(url, load, concurrency))
    client_cpu = time.process_time() - client_before
    after, cpu_after = _counters(url), _cpu_seconds(pid)
    n = len(load)
    # where the 2 cores went: the load generator itself, the service's event loop, the whole service
    row["cpu_ms_per_request"] = {"client": round(1000 * client_cpu / n, 2)} | {
        k: round(1000 * (cpu_after[k] - cpu_before[k]) / n, 2) for k in ("event_loop", "server") if k in cpu_after
    }
    delta = {k: after[k] - before[k] for k in after}
    row["target_tokens_per_s"] = round(delta["transduce_generated_tokens_total"] / row["seconds"], 1)
    batches = max(delta["transduce_batch_size_count"], 1.0)
    row["mean_batch_size"] = round(delta["transduce_batch_size_sum"] / batches, 2)
    return row


def run(
    model_dir: str,
    *,
    concurrency: tuple[int, ...] = (1, 4, 16, 64),
    arrivals: tuple[float, ...] = (0.3, 0.6),
    requests: int = 256,
    beam: int = 4,
    threads: int = 2,
    work: Path,
    out_dir: Path,
    sentences: list[str] | None = None,
    modes: tuple[str, ...] = MODES,
) -> dict[str, Any]:
    """Every mode at every concurrency, uniform and mixed workloads, then the mixed workload open-loop at each of
    ``arrivals`` (fractions of the engine alone's capacity for it); load.json + load.md. ``sentences``: one per
    request, cycled (default: English verses of the Bible dev chapters)."""
    unknown = [m for m in modes if m not in CHOICES]
    if unknown or not modes:
        raise ValueError(f"unknown mode {unknown[0]!r}: choose from {', '.join(CHOICES)}" if unknown else "no mode")
    if sentences is None:
        sentences = source_sentences(max(requests, 64), work)[:requests]
    offline = offline_throughput(model_dir, sentences[:requests], beam, threads)
    # a mixed request is 1.8 sentences on average (4 in 5 have one, 1 in 5 five), counted here all at full beam
    rates = [rate for f in arrivals if (rate := round(f * offline / 1.8, 2)) > 0]
    rows = []
    for mode in modes:
        proc, url = serve(model_dir, mode, threads)
        try:
            for mixed in (False, True):
                load = workload(sentences, requests, beam, mixed)
                name = "mixed" if mixed else "uniform"
                for c in concurrency:
                    print(f"bench load: {mode}, {name}, concurrency {c} ...", file=sys.stderr)
                    row = {"mode": mode, "workload": name, "concurrency": c, "arrivals_per_s": None}
                    rows.append(row | _level(url, proc.pid, load, c, None))
            for rate in rates:
                print(f"bench load: {mode}, mixed open loop, {rate} requests/s ...", file=sys.stderr)
                row = {"mode": mode, "workload": "mixed-open", "concurrency": None, "arrivals_per_s": rate}
                rows.append(row | _level(url, proc.pid, workload(sentences, requests, beam, True), None, rate))
            print(f"bench load: {mode}, heavy requests and short ones behind them ...", file=sys.stderr)
            load, at = heavy_workload(sentences, beam)
            row = {"mode": mode, "workload": "heavy", "concurrency": None, "arrivals_per_s": None}
            rows.append(row | _level(url, proc.pid, load, None, None, at))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "beam": beam,
        "threads": threads,
        "settings_from_environment": inherited_settings(),
        "requests_per_level": requests,
        "offline_sentences_per_s": round(offline, 2),
        "rows": rows,
    }
    _compare(rows, offline)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "load.json").write_text(json.dumps(result, indent=2) + "\n")
    (out_dir / "load.md").write_text(table(result) + "\n")
    return result


def _compare(rows: list[dict[str, Any]], offline: float) -> None:
    """Ratios within each workload and level: vs batching off, vs static batching, vs the engine alone."""

    def key(r: dict[str, Any], mode: str) -> tuple[Any, ...]:
        return mode, r["workload"], r["concurrency"], r["arrivals_per_s"]

    index = {key(r, r["mode"]): r for r in rows}
    for r in rows:
        off, static = index.get(key(r, "off")), index.get(key(r, "static"))
        if off is not None and r is not off and r["workload"] not in ("mixed-open", "heavy"):  # sent on a schedule
            r["speedup_vs_off"] = round(r["requests_per_s"] / off["requests_per_s"], 2)
        if static is not None and r["mode"].startswith("step"):
            r["short_p99_vs_static"] = round(static["short_p99_ms"] / max(r["short_p99_ms"], 1e-9), 2)
        if r["workload"] == "uniform":
            r["fraction_of_offline"] = round(r["requests_per_s"] / offline, 2)


def table(result: dict[str, Any]) -> str:
    """The markdown table of load.md: grouped by workload and level, the modes side by side."""
    inherited = result.get("settings_from_environment") or {}
    settings = ", ".join(f"`{k}={v}`" for k, v in inherited.items()) or "none"
    modes_run = {r["mode"] for r in result["rows"]}
    auto = " (auto: the service's own scheduler, replicas and threads)" if "auto" in modes_run else ""
    lines = [
        f"Service load on {result['machine']}, beam {result['beam']} (mixed: 80 % one-sentence requests at beam 1 or "
        f"{result['beam']}, 20 % five-sentence requests; mixed-open: the same arriving at a fixed mean rate; heavy: "
        f"{HEAVY} requests of the longest sentences (up to {HEAVY_CHARS} characters each, beam "
        f"{heavy_beam(result['beam'])}) at once, then {SHORTS} requests of one of the shortest quarter of the "
        "sentences every 80 ms from 0.5 s), "
        f"{result['threads']} threads{auto}, {result['requests_per_level']} requests per level, {result['date']}; "
        f"engine alone ({result['threads']} threads): {result['offline_sentences_per_s']} sentences/s. Service "
        f"settings from the environment: {settings}.",
        "",
        "| workload | load | mode | req/s | target tok/s | p50 ms | p99 ms | short p50 ms | short p99 ms | "
        "mean batch | errors | vs. off | short p99: static / step | vs. engine alone | CPU ms/request: client, "
        "service loop, service |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    workloads, modes = ["uniform", "mixed", "mixed-open", "heavy"], [*CHOICES]

    def order(r: dict[str, Any]) -> tuple[int, float, int]:
        level = r["concurrency"] if r["concurrency"] is not None else r["arrivals_per_s"] or 0
        return workloads.index(r["workload"]), level, modes.index(r["mode"]) if r["mode"] in modes else len(modes)

    for r in sorted(result["rows"], key=order):
        if r["concurrency"] is not None:
            level = f"{r['concurrency']} clients"
        elif r["arrivals_per_s"] is not None:
            level = f"{r['arrivals_per_s']} req/s in"
        else:  # heavy: at once, then the short ones every 80 ms
            level = f"{HEAVY} heavy + {SHORTS} short"
        lines.append(
            f"| {r['workload']} | {level} | {r['mode']} | {r['requests_per_s']} | "
            f"{r['target_tokens_per_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['short_p50_ms']} | {r['short_p99_ms']} | "
            f"{r['mean_batch_size']} | {r['errors']} | {r.get('speedup_vs_off', '')} | "
            f"{r.get('short_p99_vs_static', '')} | {r.get('fraction_of_offline', '')} | "
            f"{', '.join(map(str, r['cpu_ms_per_request'].values()))} |"
        )
    return "\n".join(lines)
