"""``transduce translate``: files or stdin line by line to stdout, in order, batched, via a model
(``transduce.translate_local``) or a server (``--url``, ``transduce.translate_remote``).

Input from a pipe or a terminal is translated as it comes: the lines read so far go out whenever no more input is
ready, so an interactive session or a slow producer gets each line back without waiting for a full batch.
"""

from __future__ import annotations

import argparse
import math
import os
import select
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from typing import BinaryIO, NamedTuple

from transduce.engine.options import DEFAULT_OPTIONS, MAX_BEAM_SIZE, SERVED_NO_REPEAT_NGRAM_SIZE, no_repeat_problem
from transduce.server_url import bad_url

READ_SIZE = 1 << 16
TIMEOUT_S = 120.0  # --timeout: seconds a server (--url) has to answer a request


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the translate command."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--model", default=None, help="exported model directory (default: the shipped model, exported on first use)"
    )
    where.add_argument(
        "--url",
        default=None,
        help="translate through a running server instead, e.g. http://127.0.0.1:5000; requests follow the "
        "server's limits (GET /frontend/settings)",
    )
    parser.add_argument("--source", "-s", required=True, help="source language code, e.g. en")
    parser.add_argument("--target", "-t", required=True, help="target language code, e.g. de")
    parser.add_argument(
        "files", nargs="*", help="input files, one sentence or paragraph per line (default, or -: stdin)"
    )
    parser.add_argument(
        "--beam-size",
        type=int,
        default=None,
        help=f"beam size (1 = greedy; default {DEFAULT_OPTIONS.beam_size}, with --url the server's default_beam_size)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"sentences per encoder/decoder pass (default {DEFAULT_OPTIONS.chunk_size}; not with --url: a server "
        "makes its own batches)",
    )
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=None,
        help=f"never repeat a run of this many pieces (0 = off; default {SERVED_NO_REPEAT_NGRAM_SIZE}, as the "
        "server's; not with --url: a server decodes with its own NO_REPEAT_NGRAM_SIZE)",
    )
    parser.add_argument(
        "--device", default=None, choices=["auto", "cpu", "cuda"], help="where to run the model (default auto)"
    )
    parser.add_argument("--api-key", default=None, help="API key for --url servers that require one")
    parser.add_argument(
        "--timeout", type=float, default=None, help=f"HTTP timeout in seconds for --url (default {TIMEOUT_S:g})"
    )


class SourceLine(NamedTuple):
    """One input line (without its line break) and where it comes from."""

    name: str  # the file, or "stdin"
    number: int  # 1-based
    text: str


class InputError(ValueError):
    """An input line is not UTF-8 text (the message names the file, line and byte)."""


def _stream_lines(stream: BinaryIO) -> Iterator[bytes | None]:
    """The stream's lines, each with its \\n (the last maybe without); from a pipe or a terminal also None whenever
    every line read so far has been handed out and no more input is ready yet."""
    try:
        fd = stream.fileno()
        waits = not stat.S_ISREG(os.fstat(fd).st_mode)
    except (OSError, ValueError, AttributeError):  # not a file descriptor (a test's in-memory stream)
        waits = False
    if not waits:
        yield from stream
        return
    tail: list[bytes] = []  # the line being read, in parts (one long line would otherwise be copied at each read)
    while True:
        if not select.select([fd], [], [], 0)[0]:
            yield None  # nothing ready: what was read goes out before this read blocks
            select.select([fd], [], [])  # wait here, also for a stdin set non-blocking
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            continue
        if not data:
            break
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = b"".join([*tail, lines[0]])
            tail = [rest] if rest else []
            yield from (line + b"\n" for line in lines)
        elif rest:
            tail.append(rest)
    if tail:
        yield b"".join(tail)


def _lines(files: Sequence[str], stack: ExitStack) -> Iterator[SourceLine | None]:
    """The input lines, split at \\n (a \\r\\n's \\r kept as the line's trailing whitespace, so CRLF input gives
    CRLF output; any other line break kept inside the line, where the sentence splitter keeps it), each decoded as
    UTF-8 on its own: a line that is not is an InputError. None: no more input is ready for now (see
    ``_stream_lines``)."""
    streams: list[tuple[str, BinaryIO]] = [
        ("stdin", sys.stdin.buffer) if f == "-" else (f, stack.enter_context(open(f, "rb")))  # noqa: SIM115
        for f in files
    ] or [("stdin", sys.stdin.buffer)]
    for name, stream in streams:
        number = 0
        for raw in _stream_lines(stream):
            if raw is None:
                yield None
                continue
            number += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                byte = f"byte 0x{raw[exc.start]:02x}, the line's byte {exc.start + 1}"
                raise InputError(f"{name} line {number} is not UTF-8 text ({byte})") from None
            yield SourceLine(name, number, text.removesuffix("\n"))  # a \r\n's \r stays: trailing space kept


def _chunks(lines: Iterable[SourceLine | None], n: int) -> Iterator[list[SourceLine]]:
    """``lines`` in lists of ``n`` (fewer at a None: no more input ready for now); the lines read before an input
    error are handed over before it is raised."""
    chunk: list[SourceLine] = []
    try:
        for line in lines:
            if line is None:
                if chunk:
                    yield chunk
                    chunk = []
                continue
            chunk.append(line)
            if len(chunk) == n:
                yield chunk
                chunk = []
    except InputError:
        if chunk:
            yield chunk
        raise
    if chunk:
        yield chunk


def span(lines: Sequence[SourceLine]) -> str:
    """Where ``lines`` are: "in.txt line 3", "in.txt lines 3-9", "a.txt line 40 to b.txt line 2"."""
    first, last = lines[0], lines[-1]
    if first.name != last.name:
        return f"{first.name} line {first.number} to {last.name} line {last.number}"
    if first.number == last.number:
        return f"{first.name} line {first.number}"
    return f"{first.name} lines {first.number}-{last.number}"


# --- through a model ------------------------------------------------------------------------------------------------


Writer = Callable[[list[str]], None]  # puts translated lines out, in order


def _local_run(args: argparse.Namespace, lines: Iterator[SourceLine | None], write: Writer) -> None:
    from transduce.engine.errors import InputTooLongError
    from transduce.engine.options import DecodeOptions
    from transduce.engine.translator import Translator
    from transduce.shipped import resolve_model_dir
    from transduce.translate_local import LocalTranslation

    translator = Translator(resolve_model_dir(args.model), device=args.device, shared_pool=True)
    size = SERVED_NO_REPEAT_NGRAM_SIZE if args.no_repeat_ngram_size is None else args.no_repeat_ngram_size
    beam = DEFAULT_OPTIONS.beam_size if args.beam_size is None else args.beam_size
    options = DecodeOptions(beam_size=beam, chunk_size=args.batch_size, no_repeat_ngram_size=size)
    translated = LocalTranslation(translator, args.source, args.target, options)
    for chunk in _chunks(lines, args.batch_size * 2):
        try:
            write(translated([line.text for line in chunk]))
        except InputTooLongError:
            for line in chunk:  # one by one: the lines before it are written, and its own is named
                try:
                    write(translated([line.text]))
                except InputTooLongError as exc:
                    raise TranslateError(f"{span([line])} failed: {exc}") from None


class TranslateError(RuntimeError):
    """A line failed: the message names the input lines and what went wrong (the engine's or the server's answer)."""


# --- the command ----------------------------------------------------------------------------------------------------


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the command's options (one line, without the command's name), or None."""
    remote = [f for f in ("api_key", "timeout") if getattr(args, f) is not None]
    local = [f for f in ("device", "batch_size") if getattr(args, f) is not None]
    if args.url is None and remote:  # (each was passed over without a word)
        return f"{_flags(remote)}: for --url (a server) only; a local model needs none"
    if args.url is not None and local:
        return (
            f"{_flags(local)}: the local model's only; a server (--url) decodes on its own device, in its own batches"
        )
    if (args.beam_size is not None and args.beam_size < 1) or (args.batch_size is not None and args.batch_size < 1):
        return "--beam-size and --batch-size must be >= 1"
    if args.url is None and args.beam_size is not None and args.beam_size > MAX_BEAM_SIZE:
        return f"--beam-size {args.beam_size} is over {MAX_BEAM_SIZE} (its search would not fit in memory)"
    if args.url is not None and (problem := bad_url("--url", args.url)) is not None:
        return problem
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        return f"--timeout must be a number of seconds > 0, got {args.timeout}"
    if args.no_repeat_ngram_size is not None:
        problem = no_repeat_problem(args.no_repeat_ngram_size)
        if args.url is not None and problem is None:
            problem = "is the server's setting (NO_REPEAT_NGRAM_SIZE, shown by GET /frontend/settings), not --url's"
        if problem is not None:
            return f"--no-repeat-ngram-size {problem}"
    if sys.stdin is None and (not args.files or "-" in args.files):
        return "standard input is closed: name the input files"
    if sys.stdout is None:  # (an AttributeError once the first lines were translated)
        return "standard output is closed: the translations have nowhere to go (redirect it to a file)"
    return None


def _flags(fields: list[str]) -> str:
    return " and ".join("--" + f.replace("_", "-") for f in fields)


def run(args: argparse.Namespace) -> int:
    """Translate every input line; exits 1 with a one-line message on the first error (2 for bad options)."""
    from tqdm import tqdm

    from transduce.engine.errors import ModelLoadError
    from transduce.shipped import ModelUnavailableError

    if (problem := usage_problem(args)) is not None:
        print(f"transduce translate: {problem}", file=sys.stderr)
        return 2
    args.batch_size = args.batch_size or DEFAULT_OPTIONS.chunk_size
    args.device, args.timeout = args.device or "auto", args.timeout or TIMEOUT_S
    try:
        with (
            ExitStack() as stack,
            tqdm(desc="translating", unit=" lines", disable=not sys.stderr.isatty(), file=sys.stderr) as bar,
        ):

            def write(lines: list[str]) -> None:
                sys.stdout.writelines(line + "\n" for line in lines)
                sys.stdout.flush()
                bar.update(len(lines))

            if args.url is not None:
                from transduce.translate_remote import remote_run

                remote_run(args, _lines(args.files, stack), write)
            else:
                _local_run(args, _lines(args.files, stack), write)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a shell filter does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not complain
        return 141  # 128 + SIGPIPE, what a shell reports for a filter stopped this way
    except (ModelLoadError, ModelUnavailableError, ValueError, RuntimeError, OSError) as exc:
        print(f"transduce translate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - httpx transport errors and friends: still one line
        print(f"transduce translate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
