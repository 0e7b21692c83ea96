"""One function per engine: translate id sequences in batches, timing each batch; run in a fresh subprocess each."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Job:
    """What one contender translates, and how."""

    engine: str
    path: str  # model location for that engine
    sources: list[list[int]]  # source ids (tag + pieces + eos), identical for every engine
    beam_size: int
    batch_size: int
    threads: int
    fixed_length: int | None = None  # force exactly this many target tokens (random-weight models)
    pieces: list[str] = field(default_factory=list)  # id -> piece string (CTranslate2 takes tokens)


@dataclass
class Outcome:
    """Hypotheses (ids, no eos), per-batch seconds, and the subprocess's peak resident memory."""

    hyps: list[list[int]]
    batch_seconds: list[float]
    peak_rss_mb: float
    error: str | None = None


def _batches(job: Job) -> list[list[int]]:
    order = sorted(range(len(job.sources)), key=lambda i: len(job.sources[i]))  # every engine gets the same chunks
    return [order[i : i + job.batch_size] for i in range(0, len(order), job.batch_size)]


def _time(job: Job, run_batch: Callable[[list[list[int]]], list[list[int]]]) -> Outcome:
    hyps: list[list[int]] = [[] for _ in job.sources]
    run_batch([job.sources[0]])  # warm-up (graph optimisation, allocations)
    seconds = []
    for batch in _batches(job):
        started = time.perf_counter()
        out = run_batch([job.sources[i] for i in batch])
        seconds.append(time.perf_counter() - started)
        for i, h in zip(batch, out, strict=True):
            hyps[i] = h
    return Outcome(hyps, seconds, peak_rss_mb())


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss it is not inherited across fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


FULL_VOCABULARY = "-full"  # a transduce engine name ending so decodes without the vocabulary shortlist
VMAP = "-vmap"  # a CTranslate2 engine name ending so decodes with the same shortlist as a vocabulary map


def device_of(engine: str) -> str:
    """The device a contender runs on, from its name: "cuda" for *-cuda-*, else "cpu"."""
    return "cuda" if "-cuda-" in engine else "cpu"


def run_transduce(job: Job) -> Outcome:
    """This project's engine (onnxruntime, CPU or CUDA)."""
    from transduce.engine.options import DecodeOptions
    from transduce.engine.translator import Translator

    translator = Translator(
        job.path,
        device=device_of(job.engine),
        intra_threads=job.threads,
        strict_device=True,
        shortlist=not job.engine.endswith(FULL_VOCABULARY),
        shared_pool=True,  # as the service and the command line run
    )
    L = job.fixed_length

    def run(src: list[list[int]]) -> list[list[int]]:
        # the same length cap as the other engines: longest source of the batch + 50 (or exactly L)
        options = DecodeOptions(
            beam_size=job.beam_size,
            length_penalty=0.0,
            chunk_size=job.batch_size,
            max_decoding_length=L or max(len(s) for s in src) + 50,
            min_decoding_length=L or 1,
        )
        return [r.tokens[0] for r in translator.translate_batch(src, options=options)]

    return _time(job, run)


def _generate(model: Any, job: Job) -> Callable[[list[list[int]]], list[list[int]]]:
    """A batch runner over a transformers-style ``generate()``: the same kwargs and post-processing for every caller."""
    import torch

    pad = model.config.pad_token_id
    eos = model.config.eos_token_id
    L = job.fixed_length

    def run(src: list[list[int]]) -> list[list[int]]:
        S = max(len(s) for s in src)
        ids = torch.tensor([s + [pad] * (S - len(s)) for s in src])
        mask = (torch.arange(S)[None, :] < torch.tensor([len(s) for s in src])[:, None]).long()
        kwargs: dict[str, Any] = {
            "num_beams": job.beam_size,
            "do_sample": False,
            "length_penalty": 0.0,
            "early_stopping": True,
        }
        if L:
            kwargs.update(min_new_tokens=L, max_new_tokens=L)
        else:
            kwargs.update(max_new_tokens=S + 50, min_new_tokens=1)
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        return [[t for t in row.tolist()[1:] if t not in (pad, eos)] for row in out]

    return run


def run_transformers(job: Job) -> Outcome:
    """Hugging Face transformers MarianMTModel.generate (PyTorch), the reference."""
    import torch
    from transformers import MarianMTModel

    torch.set_num_threads(job.threads)
    model = MarianMTModel.from_pretrained(job.path).eval()
    return _time(job, _generate(model, job))


def run_optimum(job: Job) -> Outcome:
    """Hugging Face Optimum ORTModelForSeq2SeqLM.generate: onnxruntime CPU on Optimum's own export of the Marian
    directory (encoder, decoder, decoder with past), driven by transformers' generate() like the reference.
    Runs in a bench.optimum_site.site_pool process (Optimum needs an older transformers than this environment)."""
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    torch.set_num_threads(job.threads)  # generate()'s beam bookkeeping between the onnxruntime calls is PyTorch
    options = ort.SessionOptions()
    options.intra_op_num_threads = job.threads
    options.inter_op_num_threads = 1
    # its three sessions (encoder, decoder, decoder with past) would each keep a spinning pool: measured 1.7-2.2x
    # slower on 2 cores than with idle threads sleeping, so Optimum gets the setting this engine's encoder uses
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = ORTModelForSeq2SeqLM.from_pretrained(
        job.path, provider="CPUExecutionProvider", session_options=options, use_cache=True, use_merged=False
    )
    return _time(job, _generate(model, job))


def run_ctranslate2(job: Job) -> Outcome:
    """CTranslate2 (converted from the same Marian export): fp32 or int8 on the CPU, fp16 on CUDA."""
    import ctranslate2

    compute_type = next(t for t in ("int8", "float16", "float32") if t.replace("float", "fp") in job.engine)
    translator = ctranslate2.Translator(
        job.path, device=device_of(job.engine), intra_threads=job.threads, inter_threads=1, compute_type=compute_type
    )
    piece_to_id = {p: i for i, p in enumerate(job.pieces)}
    L = job.fixed_length

    def run(src: list[list[int]]) -> list[list[int]]:
        tokens = [[job.pieces[t] for t in s] for s in src]
        kwargs: dict[str, Any] = {"beam_size": job.beam_size, "max_batch_size": job.batch_size, "length_penalty": 0.0}
        if job.engine.endswith(VMAP):
            kwargs["use_vmap"] = True
        if L:
            kwargs.update(min_decoding_length=L, max_decoding_length=L)
        else:
            kwargs.update(max_decoding_length=max(len(s) for s in src) + 50, min_decoding_length=1)
        results = translator.translate_batch(tokens, **kwargs)
        return [[piece_to_id.get(p, 1) for p in r.hypotheses[0]] for r in results]

    return _time(job, run)


RUNNERS = {
    "transduce-cpu-fp32": run_transduce,
    "transduce-cpu-int8": run_transduce,
    "transduce-cpu-int8-full": run_transduce,
    "transduce-cuda-fp16": run_transduce,
    "transduce-cpu-fp32-full": run_transduce,
    "transformers": run_transformers,
    "ctranslate2-fp32": run_ctranslate2,
    "ctranslate2-int8": run_ctranslate2,
    "ctranslate2-fp32-vmap": run_ctranslate2,
    "ctranslate2-int8-vmap": run_ctranslate2,
    "ctranslate2-cuda-fp16": run_ctranslate2,
    "optimum-ort": run_optimum,
}


def run_job(job: Job) -> Outcome:
    """Entry point of the per-contender subprocess; an engine error is reported, not raised."""
    try:
        return RUNNERS[job.engine](job)
    except Exception as exc:  # noqa: BLE001 - a contender that cannot run is a row with an error
        return Outcome([], [], peak_rss_mb(), f"{type(exc).__name__}: {str(exc)[:200]}")


def available(engine: str) -> str | None:
    """Why a contender cannot run here (None = it can)."""
    import importlib.util

    needs = {
        "transformers": "transformers",
        "ctranslate2-fp32": "ctranslate2",
        "ctranslate2-int8": "ctranslate2",
        "ctranslate2-fp32-vmap": "ctranslate2",
        "ctranslate2-int8-vmap": "ctranslate2",
        "ctranslate2-cuda-fp16": "ctranslate2",
        "optimum-ort": "transformers",
    }  # optimum-ort: the bench extra; its own packages come from optimum_site
    if engine in needs and importlib.util.find_spec(needs[engine]) is None:
        return f"{needs[engine]} is not installed (pip install -e '.[bench]')"
    if engine == "transduce-cuda-fp16":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers() or not Path("/dev/nvidia0").exists():
            return "no CUDA device"
    if engine == "ctranslate2-cuda-fp16":
        import ctranslate2

        if ctranslate2.get_cuda_device_count() == 0:
            return "no CUDA device"
    return None
