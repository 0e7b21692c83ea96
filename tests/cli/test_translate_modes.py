"""`transduce translate` through a model reads text as the server does, streams piped input, and refuses bad options
with one line."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.service.harness import live_server
from transduce.engine.translator import Translator

TRANSDUCE = [sys.executable, "-m", "transduce"]
# other scripts, an emoji, a NUL, a line without letters, a blank one, spacing: what the model cannot spell is kept
ODD = ["Ich heiße Иван.", "I love 😀 pizza.", "שלום עולם", "Hello\x00world.", "  Two here. And 123 more!  ", "", "---"]


def translate(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRANSDUCE, "translate", *args], input=stdin, capture_output=True, text=True, timeout=300)


def test_a_model_translates_what_it_cannot_spell_as_the_server_does(
    tiny_model_dir: Path, tiny_translator: Translator
) -> None:
    """Locally "Иван" and the emoji came out as " ⁇ " or not at all, while a server kept them as written."""
    text = "\n".join(ODD) + "\n"
    local = translate("--model", str(tiny_model_dir), "-s", "en", "-t", "de", stdin=text)
    with live_server(tiny_translator) as url:
        served = translate("--url", url, "-s", "en", "-t", "de", stdin=text)
        same = translate("--url", url, "-s", "en", "-t", "en", stdin=text)  # the server passes such text through
    assert local.returncode == served.returncode == 0, local.stderr + served.stderr
    assert local.stdout == served.stdout
    lines = local.stdout.split("\n")[:-1]
    assert len(lines) == len(ODD) and "⁇" not in local.stdout
    for word, line in (("Иван", 0), ("😀", 1), ("שלום עולם", 2), ("\x00", 3)):
        assert word in lines[line], lines
    assert lines[4].startswith("  ") and lines[4].endswith("  ") and lines[5:] == ["", "---"]
    assert (same.returncode, same.stdout) == (0, text), same.stderr


def test_a_model_reads_language_codes_as_the_server_does(tiny_model_dir: Path) -> None:
    model = ["--model", str(tiny_model_dir)]
    upper = translate(*model, "-s", "EN", "-t", "De", stdin="Hello world.\n")
    lower = translate(*model, "-s", "en", "-t", "de", stdin="Hello world.\n")
    assert upper.returncode == lower.returncode == 0 and upper.stdout == lower.stdout, upper.stderr
    auto = translate(*model, "-s", "auto", "-t", "de", stdin="Hello world.\n")
    assert auto.returncode == 0 and auto.stdout == lower.stdout, auto.stderr
    same = translate(*model, "-s", "en", "-t", "en", stdin="Hello world.\n  As it is.\n")
    assert (same.returncode, same.stdout) == (0, "Hello world.\n  As it is.\n"), same.stderr
    unknown = translate(*model, "-s", "xx", "-t", "xx", stdin="Hello.\n")
    assert unknown.returncode == 1 and "not supported" in unknown.stderr, unknown.stderr


def test_piped_lines_come_back_before_the_input_ends(tiny_model_dir: Path) -> None:
    """A line written into a pipe that stays open is translated at once, not after a batch's worth of lines."""
    command = [*TRANSDUCE, "translate", "--model", str(tiny_model_dir), "-s", "en", "-t", "de"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(b"Hello world.\n")
        process.stdin.flush()
        deadline = time.monotonic() + 120
        got = b""
        while not got.endswith(b"\n") and time.monotonic() < deadline:
            if select.select([process.stdout], [], [], 1)[0]:
                got += os.read(process.stdout.fileno(), 4096)
        assert got.count(b"\n") == 1 and got.strip(), "no translation while the input stayed open"
        process.stdin.write(b"Good night.\n")
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(60) == 0 and rest.count(b"\n") == 1
    finally:
        process.kill()
        process.wait()


def test_a_reader_that_goes_away_stops_it_quietly(tiny_model_dir: Path) -> None:
    """`transduce translate ... | head -1` printed "[Errno 32] Broken pipe" and exited 1."""
    command = [*TRANSDUCE, "translate", "--model", str(tiny_model_dir), "-s", "en", "-t", "de", "--batch-size", "2"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None and process.stdin is not None
    process.stdin.write(b"Hello world.\n" * 400)
    process.stdin.close()
    assert process.stdout.readline().strip()
    process.stdout.close()
    assert process.wait(120) == 141
    assert process.stderr.read() == b""


def test_bad_options_are_one_line_and_exit_2(tiny_model_dir: Path) -> None:
    model = ["--model", str(tiny_model_dir), "-s", "en", "-t", "de"]
    url = ["--url", "http://127.0.0.1:9", "-s", "en", "-t", "de"]
    for args, fragment in (
        ([*url[2:], "--url", ""], "--url must be a server's http:// or https:// address"),
        ([*url[2:], "--url", "127.0.0.1:5000"], "--url must be a server's http:// or https:// address"),
        ([*url[2:], "--url", "http://[::1"], "got 'http://[::1' (its host or port cannot be read)"),
        ([*url[2:], "--url", "http://127.0.0.1:99999"], "(its host or port cannot be read)"),
        ([*url[2:], "--url", "http://127.0.0.1:5000?x=1"], "it takes no ?query or #fragment"),
        ([*url[2:], "--url", "http://127.0.0.1:0"], "(port 0 is no server's)"),
        ([*url, "--timeout", "nan"], "--timeout must be a number of seconds > 0, got nan"),
        ([*url, "--timeout", "0"], "--timeout must be a number of seconds > 0, got 0.0"),
        ([*url, "--timeout", "inf"], "--timeout must be a number of seconds > 0, got inf"),
        ([*model, "--beam-size", "100000000"], "--beam-size 100000000 is over 64"),
        # options of the other mode: each was passed over without a word
        ([*model, "--api-key", "k", "--timeout", "5"], "--api-key and --timeout: for --url (a server) only"),
        ([*model, "--timeout", "5"], "--timeout: for --url (a server) only; a local model needs none"),
        ([*url, "--device", "cpu"], "--device: the local model's only; a server (--url) decodes on its own"),
        ([*url, "--batch-size", "8", "--device", "cuda"], "--device and --batch-size: the local model's only"),
    ):
        result = translate(*args, stdin="Hello.\n")
        assert result.returncode == 2 and result.stdout == "", (args, result.stderr)
        assert result.stderr == f"transduce translate: {result.stderr.split(': ', 1)[1]}" and fragment in result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
    closed = subprocess.run([*TRANSDUCE, "translate", *model], stdin=subprocess.DEVNULL, capture_output=True)
    assert closed.returncode == 0 and closed.stdout == b""  # empty input: nothing to do
    shut = subprocess.run(
        [*TRANSDUCE, "translate", *model], capture_output=True, text=True, preexec_fn=lambda: os.close(0)
    )
    assert (shut.returncode, shut.stderr) == (
        2,
        "transduce translate: standard input is closed: name the input files\n",
    )
    afile = translate("--model", str(tiny_model_dir / "manifest.json"), "-s", "en", "-t", "de", stdin="x\n")
    assert afile.returncode == 1 and "is a file, not a model directory" in afile.stderr, afile.stderr


def test_a_translation_with_a_line_break_keeps_the_lines_aligned() -> None:
    """Another LibreTranslate-compatible server may answer a line break inside a translation: one line out per line."""
    from transduce.translate_remote import _Remote

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"translatedText": ["a\nb", "c\r\nd", "e"]})

    args = type("Args", (), {"source": "en", "target": "de", "beam_size": 4, "api_key": None})()
    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer)) as client:
        assert _Remote(args, client).post(["1", "2", "3"]) == (200, ["a b", "c d", "e"])


def test_a_server_over_its_req_limit_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 (the server's req_limit) is retried after its Retry-After, as a 503 is; other errors are not."""
    from transduce import translate_remote
    from transduce.translate_remote import _Remote

    answers = [httpx.Response(429, headers={"Retry-After": wait}, json={"error": "too busy"}) for wait in ("2", "60")]
    answers.append(httpx.Response(200, json={"translatedText": ["x"]}))
    slept: list[float] = []
    monkeypatch.setattr(translate_remote.time, "sleep", slept.append)
    args = type("Args", (), {"source": "en", "target": "de", "beam_size": 4, "api_key": None})()
    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(lambda _: answers.pop(0))) as client:
        assert _Remote(args, client).post(["1"]) == (200, ["x"])
    assert slept == [2.0, 60.0]  # (this server asks for up to 60 s: a wait over 30 ended the run)
    no_header = httpx.Response(429)
    assert [translate_remote._retry_after(no_header, attempt) for attempt in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    answers[:] = [httpx.Response(400, json={"error": "bad"})]
    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(lambda _: answers.pop(0))) as client:
        assert _Remote(args, client).post(["1"]) == (400, "server answered 400: bad")


def test_url_leaves_the_beam_to_the_server_and_says_what_went_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """--url sent beam 4 when no --beam-size was given (over a server's max_beam_size of 2: refused; the server's
    default_beam_size overridden); a server asking to wait an hour was retried silently for two minutes; a server
    down was "ConnectError: [Errno 111]", a key refused said to put it in the body."""
    from transduce import translate_remote
    from transduce.translate_remote import _Remote

    bodies: list[dict[str, object]] = []
    answers = [
        httpx.Response(200, json={"translatedText": ["x"]}),
        httpx.Response(429, headers={"Retry-After": "3600"}, json={"error": "too many requests"}),
        httpx.Response(401, json={"error": "an API key is required"}),
    ]

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return answers.pop(0)

    monkeypatch.setattr(translate_remote.time, "sleep", lambda s: pytest.fail(f"slept {s} s"))
    args = type("Args", (), {"source": "en", "target": "de", "beam_size": None, "api_key": None})()
    args.url, args.timeout = "http://server", 5.0
    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer)) as client:
        remote = _Remote(args, client)
        assert remote.post(["1"]) == (200, ["x"]) and "beam_size" not in bodies[0]
        status, waited = remote.post(["1"])
        assert status == 429 and "it asks to wait 3600 s: try again later" in str(waited)
        assert remote.post(["1"]) == (
            401,
            "server answered 401: an API key is required (transduce translate: --api-key KEY)",
        )

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(refused)) as client:
        assert _Remote(args, client).post(["1"]) == (
            0,
            "cannot reach http://server: ConnectError: [Errno 111] Connection refused",
        )


def test_closed_standard_output_is_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "transduce", "translate", "-s", "en", "-t", "de"],
        input="Hello.\n",
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert result.returncode == 2 and "standard output is closed" in result.stderr, result.stderr


def test_url_keeps_crlf_and_streams_blank_lines(tiny_translator: Translator) -> None:
    """--url turned a CRLF line's \\r (the server gives it back) into nothing and a lone \\r into a space; and with
    the input open it held blank lines back until more text came."""
    from tests.service.harness import FakeTranslator

    with live_server(FakeTranslator()) as url:
        command = [*TRANSDUCE, "translate", "--url", url, "-s", "en", "-t", "de"]
        crlf = subprocess.run(command, input=b"Hello.\r\nHi\rthere.\n", capture_output=True, timeout=120)
        assert crlf.returncode == 0 and crlf.stdout.split(b"\n")[0].endswith(b"\r"), crlf
        assert crlf.stdout.count(b"\r") == 2 and crlf.stdout.count(b"\n") == 2, crlf.stdout
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(b"\n\n")
            process.stdin.flush()
            got, deadline = b"", time.monotonic() + 60
            while got.count(b"\n") < 2 and time.monotonic() < deadline:
                if select.select([process.stdout], [], [], 1)[0]:
                    got += os.read(process.stdout.fileno(), 4096)
            assert got == b"\n\n", "blank lines held back while the input stayed open"
            process.stdin.close()
            assert process.wait(60) == 0
        finally:
            process.kill()
            process.wait()


def test_stream_lines_hands_out_what_is_ready_then_waits() -> None:
    """Lines of a pipe as they come, a None whenever nothing more is ready, a last line without its \\n; also from a
    descriptor set non-blocking (it failed with "Resource temporarily unavailable")."""
    import fcntl

    from transduce.translate_cli import _stream_lines

    for blocking in (True, False):
        read, write = os.pipe()
        if not blocking:
            fcntl.fcntl(read, fcntl.F_SETFL, fcntl.fcntl(read, fcntl.F_GETFL) | os.O_NONBLOCK)
        with os.fdopen(read, "rb", buffering=0) as stream:
            lines = _stream_lines(stream)
            os.write(write, b"ab")
            assert next(lines) is None  # "ab" is read, but it is no line yet
            os.write(write, b"c\nd\ne")
            assert [next(lines), next(lines), next(lines)] == [b"abc\n", b"d\n", None]
            os.write(write, b"f" * 50_000)  # within the pipe's buffer: nothing reads it yet
            os.close(write)
            assert list(lines) == [b"e" + b"f" * 50_000]
