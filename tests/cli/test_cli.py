"""The transduce console script: help for every command, translate from files/stdin/--url, one-line errors."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.service.harness import FakeTranslator, fake_translation, live_server
from transduce.cli import COMMANDS
from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.text import segment
from transduce.engine.translator import Translator

TRANSDUCE = [sys.executable, "-m", "transduce"]
LINES = ["Hello world.", "", "The cat sees the dog. A big red house.", "Good night, old world!"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRANSDUCE, *args], input=stdin, capture_output=True, text=True, timeout=300)


def expected_lines(translator: Translator) -> list[str]:
    """What `transduce translate --beam-size 2` must print: each line's sentences translated and re-joined."""
    out = []
    for line in LINES:
        item = segment(line)
        options = DecodeOptions(beam_size=2, no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE)  # as the CLI and server
        results = translator.translate(item.sentences, source_lang="en", target_lang="de", options=options)
        out.append(item.rejoin([r.hypotheses[0] for r in results]))
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_defaults(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: transduce " + command in result.stdout
    if command in ("serve", "translate", "train", "eval", "export"):
        assert "default" in result.stdout
    options = result.stdout.split("\noptions:\n", 1)[1]
    for entry in re.split(r"\n  (?=-)", options):  # one entry per option: each names its default at most once
        assert len(re.findall(r"\bdefault\b", entry)) <= 1 and "(default: None)" not in entry, entry


def test_top_level_help_and_unknown_command() -> None:
    assert run("--help").returncode == 0
    version = run("--version")  # (there was none)
    assert (version.returncode, version.stdout) == (0, f"transduce {importlib.metadata.version('transduce')}\n")
    bad = run("frobnicate")
    assert bad.returncode == 2 and "unknown command" in bad.stderr


def test_translate_files_and_stdin_in_order(tiny_model_dir: Path, tiny_translator: Translator, tmp_path: Path) -> None:
    want = expected_lines(tiny_translator)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    result = run(
        "translate",
        "--model",
        str(tiny_model_dir),
        "-s",
        "en",
        "-t",
        "de",
        "--beam-size",
        "2",
        "--batch-size",
        "2",
        str(src),
        str(src),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == want + want
    assert "\r" not in result.stderr  # no progress bar when stderr is not a terminal
    piped = run(
        "translate",
        "--model",
        str(tiny_model_dir),
        "-s",
        "en",
        "-t",
        "de",
        "--beam-size",
        "2",
        stdin="\n".join(LINES) + "\n",
    )
    assert piped.stdout.splitlines() == want


def test_translate_through_a_running_server(tiny_translator: Translator) -> None:
    with live_server(tiny_translator) as url:
        result = run(
            "translate", "--url", url, "-s", "en", "-t", "de", "--beam-size", "2", stdin="\n".join(LINES) + "\n"
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == expected_lines(tiny_translator)
        bad = run("translate", "--url", url, "-s", "en", "-t", "fr", stdin="x\n")
        assert bad.returncode == 1 and "not supported" in bad.stderr and "Traceback" not in bad.stderr


def fake_lines(lines: list[str]) -> list[str]:
    """What `transduce translate --url` prints through a server over the FakeTranslator."""
    out = []
    for line in lines:
        item = segment(line)
        out.append(item.rejoin([fake_translation(s) for s in item.sentences]))
    return out


def test_translate_url_cuts_requests_to_the_server_limits() -> None:
    long_line = "  The first sentence is here. A second one follows it! Does a third? Yes, and a fourth.  "
    lines = [f"line number {i}" for i in range(23)] + ["", "   ", "\tpadded line.  ", long_line, "last line"]
    fake = FakeTranslator()
    with live_server(fake, max_items=5, max_chars=60) as url:
        result = run("translate", "--url", url, "-s", "en", "-t", "de", stdin="\n".join(lines) + "\n")
        metrics = httpx.get(f"{url}/metrics").text
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == fake_lines(lines)  # the long line re-joined with its own spacing
    assert result.stdout.split("\n")[25:27] == [
        "\tLINE. PADDED  ",
        "  HERE. IS SENTENCE FIRST THE IT! FOLLOWS ONE SECOND A THIRD? A DOES FOURTH. A AND YES,  ",
    ]
    ok = re.search(r'transduce_requests_total\{status="200"\} (\d+)', metrics)
    assert ok and int(ok.group(1)) >= 7 and 'status="4' not in metrics  # 23 lines at 5 a request, no refusal
    assert "The first sentence is here." in fake.translated  # sent as its sentences: 89 characters > 60


def test_translate_url_names_the_lines_a_refused_request_held(tmp_path: Path) -> None:
    fake = FakeTranslator()
    fake.fail_on = {"boom": RuntimeError("engine exploded")}
    with live_server(fake, max_items=3, max_chars=40, max_sentence_tokens=3) as url:
        translate = ["translate", "--url", url, "-s", "en", "-t", "de"]
        result = run(*translate, stdin="one\ntwo\nthree\nfour\nfive six seven eight\nnine\n")
        # line 5's sentence is over max_sentence_tokens: cut at spaces into parts that fit, as a file's would be
        assert (result.returncode, result.stdout) == (0, "ONE\nTWO\nTHREE\nFOUR\nSIX FIVE SEVEN EIGHT\nNINE\n")
        assert "five six" in fake.translated and "five six seven eight" not in fake.translated
        (tmp_path / "a.txt").write_text("a\nb\nc\nd\n")
        (tmp_path / "b.txt").write_text("boom\nf\n")
        result = run(*translate, str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))
        assert (result.returncode, result.stdout) == (1, "A\nB\nC\n")
        assert result.stderr == (
            f"transduce translate: {tmp_path / 'a.txt'} line 4 to {tmp_path / 'b.txt'} line 2 failed: "
            "server answered 500: internal error\n"
        )
        result = run(*translate, stdin="fine\n" + "x" * 50 + ". Short.\n")
        assert (result.returncode, result.stdout) == (1, "FINE\n")
        assert result.stderr == (
            "transduce translate: stdin line 2: a sentence of 51 characters is over the server's limit of 40 "
            "characters per request (max_chars); split it\n"
        )


def test_translate_url_sends_a_key_too_long_for_a_body_in_the_query_string(tmp_path: Path) -> None:
    long = "zugangsschlüssel-" + "k" * 300  # over 256 characters: not in a body; not ASCII: not in a header either
    (tmp_path / "keys").write_text(f"{long}\nshort-key\n", encoding="utf-8")  # (the harness checks with "short-key")
    with live_server(FakeTranslator(), api_keys_file=str(tmp_path / "keys")) as url:
        for key in (long, "short-key"):
            result = run("translate", "--url", url, "-s", "en", "-t", "de", "--api-key", key, stdin="Hello world.\n")
            assert (result.returncode, result.stdout) == (0, "WORLD. HELLO\n"), result.stderr


def test_translate_url_writes_the_lines_before_one_that_is_not_utf8_and_reads_codes_as_the_server_does() -> None:
    with live_server(FakeTranslator()) as url:
        translate = [*TRANSDUCE, "translate", "--url", url, "-s", "en", "-t", "de"]
        result = subprocess.run(translate, input=b"one\ntwo\nSch\xf6n.\nfour\n", capture_output=True, timeout=300)
        assert (result.returncode, result.stdout) == (1, b"ONE\nTWO\n")  # the line before the bad one was lost
        assert (
            result.stderr.decode()
            == "transduce translate: stdin line 3 is not UTF-8 text (byte 0xf6, the line's byte 4)\n"
        )
        for source, target in (("EN", "De"), ("auto", "de")):  # refused before the server was asked
            codes = run("translate", "--url", url, "-s", source, "-t", target, stdin="Hello world.\n")
            assert (codes.returncode, codes.stdout) == (0, "WORLD. HELLO\n"), codes.stderr


def test_translate_url_fails_on_an_answer_that_is_not_text() -> None:
    from transduce.translate_remote import _Remote

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"translatedText": [None, "b"]})

    args = type("Args", (), {"source": "en", "target": "de", "beam_size": 4, "api_key": None})()
    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer)) as client:
        assert _Remote(args, client).post(["a", "b"]) == (200, "server answered a translation that is not a text")


def test_translate_url_cuts_a_sentence_over_max_sentence_tokens_and_keeps_the_lines_spacing() -> None:
    """A server that refuses any text of more than 6 words as this server words it: the long sentence's parts (cut at
    clause marks, then spaces) fit after one or more halvings of the budget, and the line keeps its spacing; the
    other sentence of the line is sent whole; a refusal for another reason is not cut."""
    from transduce.translate_cli import TranslateError
    from transduce.translate_remote import ServerLimits, _Remote, _translate_cut

    sent: list[str] = []
    requests: list[list[str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["q"]
        sent.extend(texts)
        requests.append(texts)
        for text in texts:
            if "forbidden" in text:
                return httpx.Response(400, json={"error": "that word is not allowed"})
            if len(text.split()) > 6:
                return httpx.Response(
                    400,
                    json={
                        "error": f"a sentence has {len(text.split())} tokens, over the limit of 6 "
                        "(max_sentence_tokens); split it"
                    },
                )
        return httpx.Response(200, json={"translatedText": [t.upper() for t in texts]})

    args = type("Args", (), {"source": "en", "target": "de", "beam_size": None, "api_key": None})()
    limits = ServerLimits(max_chars=500, max_items=3, max_sentences=2)
    line = "  Short one.  One two three four five six seven eight nine ten, eleven twelve thirteen fourteen.  "
    with httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer)) as client:
        remote = _Remote(args, client)
        status, problem = remote.post([line])
        assert status == 400 and isinstance(problem, str)
        cut = _translate_cut(remote, limits, line, problem)
        assert cut == line.upper()  # every word once, in order, with the line's own spacing
        assert "Short one." in sent and all(len(t.split()) <= 6 for t in sent[sent.index("Short one.") :])
        for request in requests[1:]:  # within max_items and max_queue_items (sentences as the server counts them)
            assert len(request) <= 3 and sum(len(segment(t).sentences) for t in request) <= 2, request
        assert _translate_cut(remote, limits, "forbidden words", "server answered 400: not allowed") is None
        with pytest.raises(TranslateError, match="that word is not allowed"):
            _translate_cut(remote, limits, "one two three four five six seven forbidden nine ten.", problem)


def test_translate_locally_names_the_line_whose_sentence_is_too_long(tiny_model_dir: Path) -> None:
    """After the lines before it (its chunk is translated again line by line to find it)."""
    long = " ".join(["word"] * 3000) + "."
    result = run("translate", "--model", str(tiny_model_dir), "-s", "en", "-t", "de", stdin=f"Hello.\n{long}\nBye.\n")
    assert result.returncode == 1 and result.stdout.count("\n") == 1, result.stderr
    assert result.stderr.startswith("transduce translate: stdin line 2 failed: a sentence has "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_translate_errors_are_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    for args, fragment in (
        (["--model", str(tmp_path / "nope")], "does not exist"),
        (["--model", str(tiny_model_dir), "-t", "fr"], "not supported"),
        (["--model", str(tiny_model_dir), str(tmp_path / "missing.txt")], "No such file"),
        (["--url", "http://127.0.0.1:9"], "ConnectError"),
    ):
        argv = ["translate", "-s", "en", "-t", "de", *args]
        if "-t" in args:
            argv = ["translate", "-s", "en", *args]
        result = run(*argv, stdin="Hello\n")
        assert result.returncode == 1, (args, result.stderr)
        assert fragment in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for command in (["translate", "-s", "en", "-t", "de"], ["eval", "--tsv", "x.tsv", "-s", "en", "-t", "de"]):
        result = run(*command, "--model", str(tiny_model_dir), "--no-repeat-ngram-size", "1", stdin="Hello\n")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert "--no-repeat-ngram-size must be 0 (off) or at least 2" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    result = run("translate", "-s", "en", "-t", "de", "--url", "http://127.0.0.1:9", "--no-repeat-ngram-size", "0")
    assert result.returncode == 2 and "is the server's setting" in result.stderr, result.stderr


def test_translate_names_the_line_that_is_not_utf8(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Not a decoder's or a C++ binding's wording: the file (or stdin), the line and the byte."""
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Hello.\nSch\xf6n.\n".encode("latin-1"))
    translate = [*TRANSDUCE, "translate", "--model", str(tiny_model_dir), "-s", "en", "-t", "de"]
    result = subprocess.run([*translate, str(bad)], capture_output=True, timeout=300)
    assert result.returncode == 1 and result.stdout.count(b"\n") == 1  # the line before it is translated
    assert (
        result.stderr.decode()
        == f"transduce translate: {bad} line 2 is not UTF-8 text (byte 0xf6, the line's byte 4)\n"
    )
    result = subprocess.run(translate, input=b"a\x85b\n", capture_output=True, timeout=300)
    assert result.returncode == 1
    assert (
        result.stderr.decode() == "transduce translate: stdin line 1 is not UTF-8 text (byte 0x85, the line's byte 2)\n"
    )
    crlf = subprocess.run(translate, input=b"Hello.\r\nHi\rthere.\n", capture_output=True, timeout=300)
    assert crlf.returncode == 0 and crlf.stdout.count(b"\n") == 2 and crlf.stdout.count(b"\r") == 2  # CRLF, lone \r
    assert crlf.stdout.split(b"\n")[0].endswith(b"\r") and crlf.stdout.endswith(b"\n")


def test_export_cli(tiny_checkpoint: Path, tmp_path: Path) -> None:
    result = run("export", str(tiny_checkpoint), str(tmp_path / "m"))
    assert result.returncode == 0 and '"greedy_identical": true' in result.stdout
    bad = run("export", str(tmp_path / "missing.pt"), str(tmp_path / "m2"))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr == f"transduce export: checkpoint {tmp_path / 'missing.pt'} does not exist\n"  # nothing else


@pytest.mark.parametrize("dtype,stored", [("int8", "int8-dynamic"), ("float16", "float16")])
def test_export_cli_dtypes(tiny_checkpoint: Path, tmp_path: Path, dtype: str, stored: str) -> None:
    import json

    result = run("export", str(tiny_checkpoint), str(tmp_path / "m"), "--dtype", dtype)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert summary["dtype"] == manifest["dtype"] == stored
    if dtype == "int8":  # parity figures are the float32 stage's, and say so
        assert "max_abs_diff_log_probs" not in summary and summary["float32_greedy_identical"] is True
        assert manifest["float32_verification"]["max_abs_diff"] == summary["float32_max_abs_diff_log_probs"]
    else:
        assert summary["max_abs_diff_log_probs"] == manifest["verification"]["max_abs_diff"] <= 0.1
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # int8's intermediate float32 export is gone
    translated = run("translate", "--model", str(tmp_path / "m"), "-s", "en", "-t", "de", stdin="Hello world.\n")
    assert translated.returncode == 0 and translated.stdout.strip(), translated.stderr


def test_translate_reads_a_dash_as_stdin(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("first line\n")
    with live_server(FakeTranslator()) as url:
        result = run(
            "translate", "--url", url, "-s", "en", "-t", "de", str(tmp_path / "a.txt"), "-", stdin="from stdin\n"
        )
    assert (result.returncode, result.stdout) == (0, "LINE FIRST\nSTDIN FROM\n"), result.stderr
