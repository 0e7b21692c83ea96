"""``transduce translate``: files or stdin line by line to stdout, in order, batched, via a model or a server.

Through a server (``--url``), requests are cut to the server's own limits, read from ``GET /frontend/settings``:
at most ``max_items`` texts and ``char_limit`` characters (and ``max_queue_items`` sentences) per request. A line
over the character limit is sent as its sentences, in parts, and re-joined with its own spacing. A request the
server refuses stops the run with one line on stderr naming the input lines it held (the line itself when the
server refused it for its content); everything before them is already on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from transduce.engine.options import DEFAULT_OPTIONS, SERVED_NO_REPEAT_NGRAM_SIZE, no_repeat_problem
from transduce.engine.text import Segmented, segment

if TYPE_CHECKING:
    import httpx

RETRIES_503 = 5  # attempts for a request the server answers 503 (busy or starting), honouring its Retry-After
MAX_RETRY_WAIT_S = 30.0
LINE_BY_LINE = (400, 413)  # statuses that may be about one text of a request: then each line is sent alone


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
    parser.add_argument("--beam-size", type=int, default=DEFAULT_OPTIONS.beam_size, help="beam size (1 = greedy)")
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_OPTIONS.chunk_size, help="sentences per encoder/decoder pass"
    )
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=None,
        help=f"never repeat a run of this many pieces (0 = off; default {SERVED_NO_REPEAT_NGRAM_SIZE}, as the "
        "server's; not with --url: a server decodes with its own NO_REPEAT_NGRAM_SIZE)",
    )
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run the model")
    parser.add_argument("--api-key", default=None, help="API key for --url servers that require one")
    parser.add_argument("--timeout", type=float, default=120.0, help="HTTP timeout in seconds for --url")


class SourceLine(NamedTuple):
    """One input line (without its line break) and where it comes from."""

    name: str  # the file, or "stdin"
    number: int  # 1-based
    text: str


class InputError(ValueError):
    """An input line is not UTF-8 text (the message names the file, line and byte)."""


def _lines(files: Sequence[str], stack: ExitStack) -> Iterator[SourceLine]:
    """The input lines, split at \\n (a \\r\\n's \\r kept as the line's trailing whitespace, so CRLF input gives
    CRLF output; any other line break kept inside the line, where the sentence splitter keeps it), each decoded as
    UTF-8 on its own: a line that is not is an InputError."""
    streams: list[tuple[str, BinaryIO]] = [
        ("stdin", sys.stdin.buffer) if f == "-" else (f, stack.enter_context(open(f, "rb")))  # noqa: SIM115
        for f in files
    ] or [("stdin", sys.stdin.buffer)]
    for name, stream in streams:
        for number, raw in enumerate(stream, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                byte = f"byte 0x{raw[exc.start]:02x}, the line's byte {exc.start + 1}"
                raise InputError(f"{name} line {number} is not UTF-8 text ({byte})") from None
            yield SourceLine(name, number, text.removesuffix("\n"))  # a \r\n's \r stays: trailing space kept


def _chunks(lines: Iterable[SourceLine], n: int) -> Iterator[list[SourceLine]]:
    """``lines`` in lists of ``n``; the lines read before an input error are handed over before it is raised."""
    chunk: list[SourceLine] = []
    try:
        for line in lines:
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


def _span(lines: Sequence[SourceLine]) -> str:
    """Where ``lines`` are: "in.txt line 3", "in.txt lines 3-9", "a.txt line 40 to b.txt line 2"."""
    first, last = lines[0], lines[-1]
    if first.name != last.name:
        return f"{first.name} line {first.number} to {last.name} line {last.number}"
    if first.number == last.number:
        return f"{first.name} line {first.number}"
    return f"{first.name} lines {first.number}-{last.number}"


# --- through a model ------------------------------------------------------------------------------------------------


Writer = Callable[[list[str]], None]  # puts translated lines out, in order


def _local_run(args: argparse.Namespace, lines: Iterator[SourceLine], write: Writer) -> None:
    from transduce.engine.errors import InputTooLongError
    from transduce.engine.options import DecodeOptions
    from transduce.engine.translator import Translator
    from transduce.shipped import resolve_model_dir

    translator = Translator(resolve_model_dir(args.model), device=args.device, shared_pool=True)
    translator.check_pair(args.source, args.target)
    size = SERVED_NO_REPEAT_NGRAM_SIZE if args.no_repeat_ngram_size is None else args.no_repeat_ngram_size
    options = DecodeOptions(beam_size=args.beam_size, chunk_size=args.batch_size, no_repeat_ngram_size=size)

    def translated(chunk: list[SourceLine]) -> list[str]:
        items = [segment(line.text) for line in chunk]
        flat = [s for item in items for s in item.sentences]
        results = translator.translate(flat, source_lang=args.source, target_lang=args.target, options=options)
        out = iter(r.hypotheses[0] for r in results)
        return [item.rejoin([next(out) for _ in item.sentences]) for item in items]

    for chunk in _chunks(lines, args.batch_size * 2):
        try:
            write(translated(chunk))
        except InputTooLongError:
            for line in chunk:  # one by one: the lines before it are written, and its own is named
                try:
                    write(translated([line]))
                except InputTooLongError as exc:
                    raise TranslateError(f"{_span([line])} failed: {exc}") from None


# --- through a server -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerLimits:
    """What one request to the server may hold."""

    max_chars: int
    max_items: int
    max_sentences: int
    max_beam_size: int | None = None


def server_limits(client: httpx.Client) -> ServerLimits:
    """The server's limits from GET /frontend/settings; this server's defaults for those it does not state (an
    older server, or another LibreTranslate-compatible one)."""
    from transduce.service.config import Settings

    defaults = Settings.model_fields
    response = client.get("/frontend/settings")
    stated: dict[str, Any] = {}
    if response.status_code == 200:
        try:
            body = response.json()
            stated = body if isinstance(body, dict) else {}
        except ValueError:
            pass

    def limit(*names: str) -> int | None:
        value = next((stated[n] for n in names if n in stated), None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    return ServerLimits(
        max_chars=limit("char_limit", "charLimit") or int(defaults["max_chars"].default),
        max_items=limit("max_items") or int(defaults["max_items"].default),
        max_sentences=limit("max_queue_items") or int(defaults["max_queue_items"].default),
        max_beam_size=limit("max_beam_size"),
    )


class TranslateError(RuntimeError):
    """A request failed: the message names the input lines and the server's answer."""


@dataclass
class _Line:
    """An input line on its way: sent whole, or (over a limit) as its sentences, re-joined when all are back."""

    source: SourceLine
    parts: Segmented | None  # None: sent whole
    results: list[str | None] = field(default_factory=list)

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.source.text,) if self.parts is None else self.parts.sentences

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.results)

    def output(self) -> str:
        results = [r or "" for r in self.results]
        return self.parts.rejoin(results) if self.parts is not None else results[0]


class _Piece(NamedTuple):
    line: _Line
    slot: int  # into line.texts and line.results
    text: str


def _prepare(source: SourceLine, limits: ServerLimits) -> _Line:
    """The line, split into its sentences when it is over a per-request limit (a blank line is not sent at all: it
    stays as it is); TranslateError if even one sentence is over the character limit."""
    parts = segment(source.text)
    if not parts.sentences:
        return _Line(source, parts, [])
    if len(source.text) <= limits.max_chars and len(parts.sentences) <= limits.max_sentences:
        return _Line(source, None, [None])
    longest = max(parts.sentences, key=len)
    if len(longest) > limits.max_chars:
        raise TranslateError(
            f"{_span([source])}: a sentence of {len(longest)} characters is over the server's limit of "
            f"{limits.max_chars} characters per request (max_chars); split it"
        )
    return _Line(source, parts, [None] * len(parts.sentences))


def _pack(lines: Iterable[SourceLine], limits: ServerLimits, pending: deque[_Line]) -> Iterator[list[_Piece]]:
    """Requests' worth of pieces, in input order, each within the limits; every line read goes to ``pending``."""
    batch: list[_Piece] = []
    chars = sentences = 0
    try:
        for source in lines:
            line = _prepare(source, limits)
            pending.append(line)
            for slot, text in enumerate(line.texts):
                n = len(segment(text).sentences) if line.parts is None else 1
                if batch and (
                    len(batch) == limits.max_items
                    or chars + len(text) > limits.max_chars
                    or sentences + n > limits.max_sentences
                ):
                    yield batch
                    batch, chars, sentences = [], 0, 0
                batch.append(_Piece(line, slot, text))
                chars, sentences = chars + len(text), sentences + n
    except (InputError, TranslateError):  # a line over a limit, or one that is not UTF-8 (read from ``lines``)
        if batch:
            yield batch  # what came before the line goes out first
        raise
    if batch:
        yield batch


class _Remote:
    """POSTs texts to /translate with the command's options, retrying 503s (busy, starting) a few times."""

    def __init__(self, args: argparse.Namespace, client: httpx.Client) -> None:
        self.args, self.client = args, client

    def check(self, limits: ServerLimits) -> None:
        """Refuse before sending anything what the server would refuse in every request."""
        if limits.max_beam_size is not None and self.args.beam_size > limits.max_beam_size:
            raise TranslateError(
                f"--beam-size {self.args.beam_size} is over the server's limit of {limits.max_beam_size} "
                "(max_beam_size)"
            )
        response = self.client.get("/languages")
        if response.status_code != 200:
            return  # the first request will say what is wrong
        try:
            pairs = {(lang["code"], t) for lang in response.json() for t in lang["targets"]}
        except (ValueError, KeyError, TypeError):
            return
        source, target = self.args.source.lower(), self.args.target.lower()  # the server reads codes in any case
        known = {(s.lower(), t.lower()) for s, t in pairs}
        if (source, target) not in known and not (source == "auto" and any(t == target for _, t in known)):
            offered = ", ".join(f"{s}->{t}" for s, t in sorted(pairs))
            raise TranslateError(
                f"language pair {self.args.source}->{self.args.target} is not supported by the server "
                f"(it translates {offered})"
            )

    def post(self, texts: list[str]) -> tuple[int, list[str] | str]:
        """(200, translations), or (status, what went wrong); status 0 when no answer came."""
        import httpx

        body: dict[str, Any] = {
            "q": texts,
            "source": self.args.source,
            "target": self.args.target,
            "format": "text",
            "beam_size": self.args.beam_size,
        }
        if self.args.api_key:
            body["api_key"] = self.args.api_key
        for attempt in range(1, RETRIES_503 + 1):
            try:
                response = self.client.post("/translate", json=body)
            except httpx.HTTPError as exc:
                return 0, f"{type(exc).__name__}: {exc}"
            if response.status_code != 503 or attempt == RETRIES_503:
                break
            time.sleep(_retry_after(response))
        if response.status_code != 200:
            return response.status_code, f"server answered {response.status_code}: {_error_text(response)}"
        try:
            translated = response.json()["translatedText"]
        except (ValueError, KeyError, TypeError):
            translated = None
        if not (isinstance(translated, list) and len(translated) == len(texts)):
            return 200, f"server answered without {len(texts)} translations"
        if not all(isinstance(t, str) for t in translated):
            return 200, "server answered a translation that is not a text"
        return 200, list(translated)


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after", "")
    return min(float(value), MAX_RETRY_WAIT_S) if value.isdigit() else 1.0


def _error_text(response: httpx.Response) -> str:
    try:
        message = response.json().get("error")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else response.text[:200].replace("\n", " ")


def _remote_run(args: argparse.Namespace, lines: Iterator[SourceLine], write: Writer) -> None:
    import httpx

    with httpx.Client(base_url=args.url, timeout=args.timeout) as client:
        limits = server_limits(client)
        remote = _Remote(args, client)
        remote.check(limits)
        pending: deque[_Line] = deque()

        def settle(pieces: list[_Piece], translations: list[str]) -> None:
            for piece, text in zip(pieces, translations, strict=True):
                piece.line.results[piece.slot] = text
            finished = []
            while pending and pending[0].done:
                finished.append(pending.popleft().output())
            write(finished)

        for batch in _pack(lines, limits, pending):
            status, answer = remote.post([p.text for p in batch])
            if isinstance(answer, list):
                settle(batch, answer)
                continue
            if status not in LINE_BY_LINE or len({id(p.line) for p in batch}) == 1:
                raise TranslateError(f"{_span([p.line.source for p in batch])} failed: {answer}")
            for piece in batch:  # the refusal may be about one text: send them one by one to name its line
                status, answer = remote.post([piece.text])
                if not isinstance(answer, list):
                    raise TranslateError(f"{_span([piece.line.source])} failed: {answer}")
                settle([piece], answer)
        settle([], [])  # blank lines at the end


# --- the command ----------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Translate every input line; exits 1 with a one-line message on the first error."""
    from tqdm import tqdm

    from transduce.engine.errors import ModelLoadError
    from transduce.shipped import ModelUnavailableError

    if args.beam_size < 1 or args.batch_size < 1:
        print("transduce translate: --beam-size and --batch-size must be >= 1", file=sys.stderr)
        return 2
    if args.no_repeat_ngram_size is not None:
        problem = no_repeat_problem(args.no_repeat_ngram_size)
        if args.url and problem is None:
            problem = "is the server's setting (NO_REPEAT_NGRAM_SIZE, shown by GET /frontend/settings), not --url's"
        if problem is not None:
            print(f"transduce translate: --no-repeat-ngram-size {problem}", file=sys.stderr)
            return 2
    try:
        with (
            ExitStack() as stack,
            tqdm(desc="translating", unit=" lines", disable=not sys.stderr.isatty(), file=sys.stderr) as bar,
        ):

            def write(lines: list[str]) -> None:
                sys.stdout.writelines(line + "\n" for line in lines)
                sys.stdout.flush()
                bar.update(len(lines))

            (_remote_run if args.url else _local_run)(args, _lines(args.files, stack), write)
    except (ModelLoadError, ModelUnavailableError, ValueError, RuntimeError, OSError) as exc:
        print(f"transduce translate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - httpx transport errors and friends: still one line
        print(f"transduce translate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
