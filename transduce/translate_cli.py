"""``transduce translate``: files or stdin line by line to stdout, in order, batched, via a model or a server."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import TextIO

CHUNK_LINES = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the translate command."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--model", default=None, help="ONNX model directory (default: the shipped model, exported on first use)"
    )
    where.add_argument(
        "--url", default=None, help="translate through a running server instead, e.g. http://127.0.0.1:5000"
    )
    parser.add_argument("--source", "-s", required=True, help="source language code, e.g. en")
    parser.add_argument("--target", "-t", required=True, help="target language code, e.g. de")
    parser.add_argument("files", nargs="*", help="input files, one sentence or paragraph per line (default: stdin)")
    parser.add_argument("--beam-size", type=int, default=4, help="beam size (1 = greedy)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per engine batch")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run the model")
    parser.add_argument("--api-key", default=None, help="API key for --url servers that require one")
    parser.add_argument("--timeout", type=float, default=120.0, help="HTTP timeout in seconds for --url")


def _lines(files: Sequence[str], stack: ExitStack) -> Iterator[str]:
    streams: list[TextIO] = [stack.enter_context(open(f, encoding="utf-8")) for f in files] or [sys.stdin]  # noqa: SIM115
    for stream in streams:
        for line in stream:
            yield line.rstrip("\n").rstrip("\r")


def _chunks(lines: Iterator[str], n: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _local_translator(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from engine.options import DecodeOptions
    from engine.text import join_sentences
    from engine.translator import Translator
    from transduce.models import resolve_model_dir

    translator = Translator(resolve_model_dir(args.model), device=args.device)
    translator.check_pair(args.source, args.target)
    options = DecodeOptions(beam_size=args.beam_size, max_batch_size=args.batch_size)

    def translate(lines: list[str]) -> list[str]:
        split = [translator.split_sentences(line) for line in lines]
        flat = [s for parts in split for s, _ in parts]
        out = iter(
            r.hypotheses[0]
            for r in translator.translate(flat, source_lang=args.source, target_lang=args.target, options=options)
        )
        return [join_sentences([next(out) for _ in parts], [ws for _, ws in parts]) for parts in split]

    return translate


def _remote_translator(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    import httpx

    client = httpx.Client(base_url=args.url, timeout=args.timeout)

    def translate(lines: list[str]) -> list[str]:
        body = {"q": lines, "source": args.source, "target": args.target, "format": "text", "beam_size": args.beam_size}
        if args.api_key:
            body["api_key"] = args.api_key
        response = client.post("/translate", json=body)
        if response.status_code != 200:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise RuntimeError(f"server answered {response.status_code}: {message}")
        return list(response.json()["translatedText"])

    return translate


def run(args: argparse.Namespace) -> int:
    """Translate every input line; exits 1 with a one-line message on the first error."""
    from tqdm import tqdm

    from engine.errors import ModelLoadError

    if args.beam_size < 1 or args.batch_size < 1:
        print("transduce translate: --beam-size and --batch-size must be >= 1", file=sys.stderr)
        return 2
    try:
        translate = _remote_translator(args) if args.url else _local_translator(args)
        with (
            ExitStack() as stack,
            tqdm(desc="translating", unit=" lines", disable=not sys.stderr.isatty(), file=sys.stderr) as bar,
        ):
            for chunk in _chunks(_lines(args.files, stack), CHUNK_LINES if args.url else args.batch_size * 2):
                for line in translate(chunk):
                    sys.stdout.write(line + "\n")
                sys.stdout.flush()
                bar.update(len(chunk))
    except (ModelLoadError, ValueError, RuntimeError, OSError) as exc:
        print(f"transduce translate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - httpx transport errors and friends: still one line
        print(f"transduce translate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
