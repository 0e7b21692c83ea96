"""``transduce bench engines``, ``load`` and ``cuda`` (benchmarks, not tests)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from transduce.paths import user_cache_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of both benchmarks."""
    parser.add_argument(
        "which",
        choices=["engines", "load", "cuda"],
        help="engines: this engine vs transformers and CTranslate2 on the same weights; "
        "load: the service under concurrent clients, batching on vs off; "
        "cuda (a GPU machine): this engine on CUDA vs the CPU, and the step scheduler on CUDA",
    )
    parser.add_argument(
        "--checkpoint", default=None, help="checkpoint for `engines` and `cuda` (default: the shipped model)"
    )
    parser.add_argument("--model", default=None, help="ONNX model dir for `load` (default: the shipped model)")
    parser.add_argument("--sentences", type=int, default=500, help="source sentences (Bible dev chapters)")
    parser.add_argument(
        "--pairs",
        default=None,
        help="`cuda`: a file of source TAB reference lines instead of the Bible dev verses (a GPU machine that "
        "cannot download them; docs/gpu-check.md writes one)",
    )
    parser.add_argument("--batch1-sentences", type=int, default=100, help="sentences for the batch-1 rows")
    parser.add_argument("--requests", type=int, default=256, help="requests per concurrency level (load)")
    parser.add_argument("--concurrency", default="1,4,16,64", help="client counts (load)")
    parser.add_argument(
        "--arrivals",
        default="0.3,0.6",
        help="open-loop arrival rates of the mixed workload, as fractions of the engine alone's capacity (load; "
        "empty: none)",
    )
    parser.add_argument("--beam-size", type=int, default=4, help="beam size (load)")
    parser.add_argument(
        "--modes",
        default="step,step-replicas,static,replicas,off",
        help="service modes to compare (load); replicas: static batching with one engine replica per thread; "
        "step-replicas: the step scheduler with one worker and engine replica per thread; auto (not run unless named): "
        "the service's own scheduler, replicas and threads",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="`engines`: run every config this many times, all engines in turn each round (each round starting one "
        "engine later), and keep each engine's best (a shared machine's speed drifts between runs)",
    )
    parser.add_argument(
        "--threads",
        default="1,2",
        help="thread counts, comma-separated: `engines` runs each engine with each, keeps the best; `load` the "
        "largest; `cuda` the CPU rows' (e.g. 4,16 on a GPU machine's host)",
    )
    parser.add_argument(
        "--fixed-length",
        type=int,
        default=None,
        help="force every engine to emit exactly N tokens (for random-weight models)",
    )
    parser.add_argument(
        "--work", default=str(user_cache_dir() / "bench"), help="converted models and downloads (a cache, reused)"
    )
    parser.add_argument("--out", default="bench/results", help="where results JSON and markdown go")


def run(args: argparse.Namespace) -> int:
    """Run the chosen benchmark and print its markdown table."""
    from transduce.bench.load import CHOICES as MODE_CHOICES
    from transduce.engine.options import MAX_BEAM_SIZE
    from transduce.shipped import DEFAULT_CHECKPOINT, resolve_model_dir

    work, out = Path(args.work), Path(args.out)
    try:  # the options first: a bad one is exit 2, as everywhere (a failed run is 1)
        threads = _counts(args.threads, "--threads")
        levels = _counts(args.concurrency, "--concurrency")
        arrivals = _fractions(args.arrivals)
        if args.requests < 1 or args.rounds < 1:  # (--requests 0 ran, then ended in numpy's IndexError)
            raise ValueError(f"--requests and --rounds must be >= 1, got {args.requests}, {args.rounds}")
        if args.sentences < 1 or args.batch1_sentences < 1:  # (found after the exports: a ZeroDivisionError)
            raise ValueError(
                f"--sentences and --batch1-sentences must be >= 1, got {args.sentences}, {args.batch1_sentences}"
            )
        if args.fixed_length is not None and args.fixed_length < 1:
            raise ValueError(f"--fixed-length must be >= 1 (tokens each engine emits), got {args.fixed_length}")
        if not 1 <= args.beam_size <= MAX_BEAM_SIZE:  # (found once the model had loaded)
            raise ValueError(f"--beam-size must be between 1 (greedy) and {MAX_BEAM_SIZE}, got {args.beam_size}")
        modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
        if not modes or not set(modes) <= set(MODE_CHOICES):  # (found once the engine alone had been timed)
            raise ValueError(f"--modes takes modes from {', '.join(MODE_CHOICES)}, comma-separated, got {args.modes!r}")
        if out.exists() and not out.is_dir():  # (found once the whole benchmark had run: "[Errno 17] File exists")
            raise ValueError(f"--out {out} is a file: name a directory for the results")
    except ValueError as exc:
        print(f"transduce bench: {exc}", file=sys.stderr)
        return 2
    try:
        if args.which == "engines":
            from transduce.bench.engines import run as run_engines

            checkpoint = Path(args.checkpoint or DEFAULT_CHECKPOINT)
            if not checkpoint.is_file():
                raise ValueError(f"checkpoint {checkpoint} does not exist")
            run_engines(
                checkpoint,
                n=args.sentences,
                n_batch1=args.batch1_sentences,
                threads=threads,
                work=work,
                out_dir=out,
                fixed_length=args.fixed_length,
                rounds=args.rounds,
            )
            print((out / "engines.md").read_text())
        elif args.which == "cuda":
            from transduce.bench.cuda import read_pairs
            from transduce.bench.cuda import run as run_cuda
            from transduce.bench.engines import bible_pairs

            checkpoint = Path(args.checkpoint or DEFAULT_CHECKPOINT)
            if not checkpoint.is_file():
                raise ValueError(f"checkpoint {checkpoint} does not exist")
            pairs = read_pairs(Path(args.pairs), args.sentences) if args.pairs else bible_pairs(args.sentences, work)
            run_cuda(checkpoint, pairs, n_batch1=args.batch1_sentences, threads=threads, work=work, out_dir=out)
            print((out / "cuda.md").read_text())
        else:
            from transduce.bench.load import run as run_load

            run_load(
                str(resolve_model_dir(args.model)),
                concurrency=levels,
                arrivals=arrivals,
                requests=args.requests,
                beam=args.beam_size,
                threads=max(threads),
                work=work,
                out_dir=out,
                modes=modes,
            )
            print((out / "load.md").read_text())
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"transduce bench: {exc}", file=sys.stderr)
        return 1
    return 0


def _counts(text: str, flag: str) -> tuple[int, ...]:
    """``--threads`` / ``--concurrency``: comma-separated whole numbers, each at least 1 (0 clients ran, then ended
    in numpy's IndexError; "two" was Python's "invalid literal for int()")."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or not all(re.fullmatch(r"[0-9]{1,6}", p) and int(p) >= 1 for p in parts):  # (isdigit() takes "²")
        raise ValueError(f"{flag} takes whole numbers >= 1, comma-separated, got {text!r}")
    return tuple(int(p) for p in parts)


def _fractions(text: str) -> tuple[float, ...]:
    """``--arrivals``: comma-separated fractions of the engine alone's capacity, each a positive number."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"--arrivals takes positive numbers, got {part!r}") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"--arrivals takes positive numbers, got {part!r}")
        values.append(value)
    return tuple(values)
