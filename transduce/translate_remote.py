"""``transduce translate --url``: lines translated through a running server (this one or another
LibreTranslate-compatible one).

Requests are cut to the server's own limits, read from ``GET /frontend/settings``: at most ``max_items`` texts and
``char_limit`` characters (and ``max_queue_items`` sentences) per request. A line over the character limit is sent as
its sentences, in parts, and re-joined with its own spacing; a sentence the server refuses as over its
``max_sentence_tokens`` is cut into parts that fit (``_translate_cut``). A request the server refuses otherwise stops
the run with one line on stderr naming the input lines it held (the line itself when the server refused it for its
content); everything before them is already on stdout.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from transduce.engine.text import Segmented, segment, split_long
from transduce.translate_cli import InputError, SourceLine, TranslateError, Writer, span

if TYPE_CHECKING:
    import httpx

RETRIES_BUSY = 5  # attempts for a request the server answers 503 (busy, starting) or 429 (req_limit), honouring
# its Retry-After
MAX_RETRY_WAIT_S = 60.0  # this server's own Retry-After goes up to 60 s (a full queue, req_limit 1): waited for
_LINE_BREAK = re.compile(r"\r?\n")
LINE_BY_LINE = (400, 413)  # statuses that may be about one text of a request: then each line is sent alone
# this server's refusal of a sentence over its max_sentence_tokens (``service.validation``): such a text is cut
_OVER_TOKENS = re.compile(r"has (\d+) tokens, over the (?:model's )?limit of (\d+)")  # (or the model's own limit)
CUT_TRIES = 6  # budgets tried for the parts of a sentence over max_sentence_tokens, each half the one before


@dataclass(frozen=True)
class ServerLimits:
    """What one request to the server may hold."""

    max_chars: int
    max_items: int
    max_sentences: int
    max_beam_size: int | None = None

    def full(self, texts: int, chars: int, sentences: int, text: str, n: int) -> bool:
        """Whether a request of ``texts`` texts, ``chars`` characters and ``sentences`` sentences is full for one
        more ``text`` of ``n`` sentences."""
        return bool(texts) and (
            texts == self.max_items or chars + len(text) > self.max_chars or sentences + n > self.max_sentences
        )


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
            f"{span([source])}: a sentence of {len(longest)} characters is over the server's limit of "
            f"{limits.max_chars} characters per request (max_chars); split it"
        )
    return _Line(source, parts, [None] * len(parts.sentences))


def _pack(lines: Iterable[SourceLine | None], limits: ServerLimits, pending: deque[_Line]) -> Iterator[list[_Piece]]:
    """Requests' worth of pieces, in input order, each within the limits; every line read goes to ``pending``. A
    None in ``lines`` (no more input for now) hands over what is gathered, an empty list if nothing."""
    batch: list[_Piece] = []
    chars = sentences = 0
    try:
        for source in lines:
            if source is None:  # an empty batch too: the lines already done (blank ones) are written
                yield batch
                batch, chars, sentences = [], 0, 0
                continue
            line = _prepare(source, limits)
            pending.append(line)
            for slot, text in enumerate(line.texts):
                n = len(segment(text).sentences) if line.parts is None else 1
                if limits.full(len(batch), chars, sentences, text, n):
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
    """POSTs texts to /translate with the command's options, retrying 503s (busy, starting) and 429s (the server's
    req_limit) a few times."""

    def __init__(self, args: argparse.Namespace, client: httpx.Client) -> None:
        self.args, self.client = args, client

    def check(self, limits: ServerLimits) -> None:
        """Refuse before sending anything what the server would refuse in every request."""
        beam = self.args.beam_size
        if limits.max_beam_size is not None and beam is not None and beam > limits.max_beam_size:
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
        passed = source == target and any(target in pair for pair in known)  # the server gives such text back
        if (
            (source, target) not in known
            and not passed
            and not (source == "auto" and any(t == target for _, t in known))
        ):
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
        }
        if self.args.beam_size is not None:  # (else the server's default_beam_size: 4 was always sent)
            body["beam_size"] = self.args.beam_size
        from transduce.service.apikeys import MAX_KEY_CHARS  # the longest key this server reads from a body

        params = {}
        if self.args.api_key and len(self.args.api_key) > MAX_KEY_CHARS:  # too long for a body: in the query string
            params["api_key"] = self.args.api_key  # (LibreTranslate reads it there too; a header takes ASCII only)
        elif self.args.api_key:  # in the body, as LibreTranslate reads it
            body["api_key"] = self.args.api_key
        for attempt in range(1, RETRIES_BUSY + 1):
            try:
                response = self.client.post("/translate", json=body, params=params)
            except httpx.HTTPError as exc:
                return 0, unreachable(self.args, exc)
            if response.status_code not in (429, 503) or attempt == RETRIES_BUSY:
                break
            wait = _retry_after(response, attempt)
            if wait > MAX_RETRY_WAIT_S:  # (a server asking for an hour was retried, silently, for two minutes)
                problem = f"{_error_text(response)} (it asks to wait {wait:g} s: try again later)"
                return response.status_code, f"server answered {response.status_code}: {problem}"
            print(
                f"transduce translate: the server answered {response.status_code}, trying again in {wait:g} s",
                file=sys.stderr,
            )
            time.sleep(wait)
        if response.status_code != 200:
            hint = " (transduce translate: --api-key KEY)" if response.status_code in (401, 403) else ""
            return response.status_code, f"server answered {response.status_code}: {_error_text(response)}{hint}"
        try:
            translated = response.json()["translatedText"]
        except (ValueError, KeyError, TypeError):
            translated = None
        if not (isinstance(translated, list) and len(translated) == len(texts)):
            return 200, f"server answered without {len(texts)} translations"
        if not all(isinstance(t, str) for t in translated):
            return 200, "server answered a translation that is not a text"
        # one line out per line in: a line break inside a translation (another LibreTranslate-compatible server's)
        # would shift every line after it
        # (a \r alone is kept: a CRLF line's own, which the server gives back as trailing whitespace)
        return 200, [_LINE_BREAK.sub(" ", t) for t in translated]


def unreachable(args: argparse.Namespace, exc: Exception) -> str:
    """What went wrong when no answer came from the server at ``args.url`` (it said "ConnectError: [Errno 111]")."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {args.url} within {args.timeout:g} s (--timeout)"
    return f"cannot reach {args.url}: {type(exc).__name__}: {exc}"


def _retry_after(response: httpx.Response, attempt: int) -> float:
    """Seconds to wait before try ``attempt + 1``: the server's Retry-After (over ``MAX_RETRY_WAIT_S``: not retried),
    else 1, 2, 4, 8 s (another server may send none: five tries in 4 s did not outlast a minute's limit)."""
    value = response.headers.get("retry-after", "").strip()
    return float(value) if value.isdigit() else 2.0 ** (attempt - 1)


def _error_text(response: httpx.Response) -> str:
    try:
        message = response.json().get("error")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else response.text[:200].replace("\n", " ")


def remote_run(args: argparse.Namespace, lines: Iterator[SourceLine | None], write: Writer) -> None:
    """Translate ``lines`` through the server at ``args.url``, writing each line's translation in order."""
    import httpx

    with httpx.Client(base_url=args.url, timeout=args.timeout) as client:
        remote = _Remote(args, client)
        try:
            limits = server_limits(client)
            remote.check(limits)
        except httpx.HTTPError as exc:
            raise TranslateError(unreachable(args, exc)) from None
        pending: deque[_Line] = deque()

        def settle(pieces: list[_Piece], translations: list[str]) -> None:
            for piece, text in zip(pieces, translations, strict=True):
                piece.line.results[piece.slot] = text
            finished = []
            while pending and pending[0].done:
                finished.append(pending.popleft().output())
            write(finished)

        def alone(piece: _Piece, status: int, answer: str) -> list[str]:
            """The translation of a piece the server refused (``status``, ``answer``): cut to fit when a sentence of
            it was over max_sentence_tokens, else the run stops naming its line."""
            cut = _translate_cut(remote, limits, piece.text, answer) if status == 400 else None
            if cut is None:
                raise TranslateError(f"{span([piece.line.source])} failed: {answer}")
            return [cut]

        for batch in _pack(lines, limits, pending):
            if not batch:
                settle([], [])
                continue
            status, answer = remote.post([p.text for p in batch])
            if isinstance(answer, list):
                settle(batch, answer)
                continue
            if status not in LINE_BY_LINE:
                raise TranslateError(f"{span([p.line.source for p in batch])} failed: {answer}")
            if len(batch) == 1:
                settle(batch, alone(batch[0], status, answer))
                continue
            for piece in batch:  # the refusal may be about one text: send them one by one to name its line
                status, answer = remote.post([piece.text])
                settle([piece], answer if isinstance(answer, list) else alone(piece, status, answer))
        settle([], [])  # blank lines at the end


def _translate_cut(remote: _Remote, limits: ServerLimits, text: str, problem: str) -> str | None:
    """``text`` translated although the server refused it (``problem``) for a sentence over its max_sentence_tokens:
    every sentence over a character budget is cut at clause marks or spaces (``split_long``, as the server cuts one in
    a file), its parts translated in requests within ``limits`` and joined with the text's own spacing. The budget is
    the longest sentence's length scaled by the server's limit over the tokens it counted (9/10 of that: characters
    per token vary along a text), halved while the server still refuses, ``CUT_TRIES`` times at most. None when the
    refusal is about something else (TranslateError when a part is refused for another reason)."""
    found = _OVER_TOKENS.search(problem)
    parts = segment(text)
    if found is None or not parts.sentences:
        return None
    tokens, limit = int(found[1]), int(found[2])
    budget = max(1, int(max(map(len, parts.sentences)) * limit / max(tokens, 1) * 0.9))
    for _ in range(CUT_TRIES):
        fits = _within(budget)
        cut = [split_long(sentence, fits) for sentence in parts.sentences]
        pieces = [piece for sentence in cut for piece in sentence]
        bodies = [piece.rstrip() for piece in pieces]  # each part's trailing space is put back here, not sent
        translated: list[str] = []
        for request in _requests(bodies, limits):
            status, answer = remote.post(request)
            if not isinstance(answer, list):
                if status == 400 and _OVER_TOKENS.search(answer) and budget > 1:
                    break
                raise TranslateError(
                    f"{len(request)} parts of a sentence cut to fit max_sentence_tokens failed: {answer}"
                )
            translated.extend(answer)
        else:
            spaced = iter(t + piece[len(body) :] for t, piece, body in zip(translated, pieces, bodies, strict=True))
            return parts.rejoin(["".join(next(spaced) for _ in sentence) for sentence in cut])
        budget //= 2
    raise TranslateError(f"a sentence stayed over the server's max_sentence_tokens after {CUT_TRIES} cuts: {problem}")


def _within(budget: int) -> Callable[[str], bool]:
    return lambda text: len(text) <= budget


def _requests(texts: list[str], limits: ServerLimits) -> Iterator[list[str]]:
    """``texts`` in consecutive requests of at most ``max_items`` texts, ``max_chars`` characters and
    ``max_sentences`` sentences (as the server segments them)."""
    request: list[str] = []
    chars = sentences = 0
    for text in texts:
        n = len(segment(text).sentences)
        if limits.full(len(request), chars, sentences, text, n):
            yield request
            request, chars, sentences = [], 0, 0
        request.append(text)
        chars, sentences = chars + len(text), sentences + n
    if request:
        yield request
