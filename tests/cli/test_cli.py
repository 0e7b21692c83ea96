"""The transduce console script: help for every command, translate from files/stdin/--url, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from livesrv import live_server

from engine.options import DecodeOptions
from engine.translator import Translator
from transduce.cli import COMMANDS

TRANSDUCE = [sys.executable, "-m", "transduce"]
LINES = ["Hello world.", "", "The cat sees the dog. A big red house.", "Good night, old world!"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRANSDUCE, *args], input=stdin, capture_output=True, text=True, timeout=300)


def expected_lines(translator: Translator) -> list[str]:
    out = []
    for line in LINES:
        parts = translator.split_sentences(line)
        results = translator.translate([s for s, _ in parts], source_lang="en", target_lang="de",
                                       options=DecodeOptions(beam_size=2))
        out.append("".join(r.hypotheses[0] + ws for r, (_, ws) in zip(results, parts, strict=True)))
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_with_defaults(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: transduce " + command in result.stdout
    if command in ("serve", "translate", "train", "eval", "export"):
        assert "default" in result.stdout


def test_top_level_help_and_unknown_command() -> None:
    assert run("--help").returncode == 0
    bad = run("frobnicate")
    assert bad.returncode == 2 and "unknown command" in bad.stderr


def test_translate_files_and_stdin_in_order(tiny_model_dir: Path, tiny_translator: Translator,
                                            tmp_path: Path) -> None:
    want = expected_lines(tiny_translator)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    result = run("translate", "--model", str(tiny_model_dir), "-s", "en", "-t", "de", "--beam-size", "2",
                 "--batch-size", "2", str(src), str(src))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == want + want
    assert "\r" not in result.stderr  # no progress bar when stderr is not a terminal
    piped = run("translate", "--model", str(tiny_model_dir), "-s", "en", "-t", "de", "--beam-size", "2",
                stdin="\n".join(LINES) + "\n")
    assert piped.stdout.splitlines() == want


def test_translate_through_a_running_server(tiny_translator: Translator) -> None:
    with live_server(tiny_translator) as url:
        result = run("translate", "--url", url, "-s", "en", "-t", "de", "--beam-size", "2",
                     stdin="\n".join(LINES) + "\n")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == expected_lines(tiny_translator)
        bad = run("translate", "--url", url, "-s", "en", "-t", "fr", stdin="x\n")
        assert bad.returncode == 1 and "not supported" in bad.stderr and "Traceback" not in bad.stderr


def test_translate_errors_are_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    for args, fragment in ((["--model", str(tmp_path / "nope")], "does not exist"),
                           (["--model", str(tiny_model_dir), "-t", "fr"], "not supported"),
                           (["--model", str(tiny_model_dir), str(tmp_path / "missing.txt")], "No such file"),
                           (["--url", "http://127.0.0.1:9"], "ConnectError")):
        argv = ["translate", "-s", "en", "-t", "de", *args]
        if "-t" in args:
            argv = ["translate", "-s", "en", *args]
        result = run(*argv, stdin="Hello\n")
        assert result.returncode == 1, (args, result.stderr)
        assert fragment in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_export_cli(tiny_checkpoint: Path, tmp_path: Path) -> None:
    result = run("export", str(tiny_checkpoint), str(tmp_path / "m"))
    assert result.returncode == 0 and '"greedy_identical": true' in result.stdout
    bad = run("export", str(tmp_path / "missing.pt"), str(tmp_path / "m2"))
    assert bad.returncode == 1 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


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
