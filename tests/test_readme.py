"""README commands that run without Docker or a GPU are run here, so the README cannot rot."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.harness import live_server
from transduce.engine.translator import Translator
from transduce.shipped import DEFAULT_CHECKPOINT

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def shell_lines(section: str) -> list[str]:
    """Commands of the ```bash blocks under a '## section' heading, continuation lines joined, comments dropped."""
    body = README.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", body, re.S):
        for continued in re.finditer(r"\\\n", block):  # inside single quotes the shell keeps both characters
            assert not _open_quote(block[: continued.start()]), f"a line continued inside quotes: {block[:200]}"
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def _open_quote(shell: str) -> bool:
    """Whether ``shell`` text ends inside a quoted string (as the shell reads it: comments and escapes included)."""
    lexer = shlex.shlex(shell, posix=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    try:
        list(lexer)
    except ValueError:  # "No closing quotation"
        return True
    return False


def test_every_api_curl_example_works(tiny_translator: Translator, tmp_path: Path) -> None:
    commands = [c for c in shell_lines("Call the API") if c.startswith("curl")]
    assert len(commands) >= 9
    (tmp_path / "notes.txt").write_text("Meeting notes.\n\nThe house is small. The dog sleeps.\n")  # file=@notes.txt
    with live_server(tiny_translator) as url:
        for command in commands:
            result = subprocess.run(
                command.replace("http://127.0.0.1:5000", url) + " -w '\\n%{http_code}'",
                shell=True,
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            body, _, status = result.stdout.rpartition("\n")
            assert result.returncode == 0 and status == "200", (command, status, body[:300])
            if "/metrics" not in command:
                json.loads(body)


def test_shell_translation_examples_with_the_shipped_model(tmp_path: Path) -> None:
    """The first `transduce translate` example, exactly, on the shipped default model (exported on first use)."""
    if not DEFAULT_CHECKPOINT.is_file():
        pytest.fail(f"the shipped model {DEFAULT_CHECKPOINT} is missing")
    command = shell_lines("Translate from the shell")[0]
    assert command.startswith("echo ") and "transduce translate" in command
    result = subprocess.run(
        command, shell=True, capture_output=True, text=True, timeout=600, cwd=ROOT, env={"PATH": f"{BIN}:/usr/bin:/bin"}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.strip().splitlines()) == 1 and result.stdout.strip()


def test_documented_commands_exist() -> None:
    from transduce.cli import COMMANDS

    for name in re.findall(r"`transduce ([a-z-]+)", README):
        assert name in COMMANDS, name


def test_the_readme_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The engine-as-a-library example under "How it fits together" runs as written."""
    body = README.split("## How it fits together\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", body, re.S)
    assert blocks, "no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    printed = capsys.readouterr().out
    assert printed.startswith("[") and printed.count("'") >= 4  # two hypotheses and their scores
