"""A serving-only install (no PyTorch) and a busy port at the command line: one actionable line, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

TRANSDUCE = [sys.executable, "-m", "transduce"]


@pytest.fixture
def no_torch(tmp_path: Path) -> dict[str, str]:
    """Environment in which ``import torch`` fails as it does where the [torch] extra is not installed."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    return {**os.environ, "PYTHONPATH": str(fake.parent), "TRANSDUCE_DEFAULT_EXPORT_DIR": str(tmp_path / "cache")}


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_serve_without_torch_says_what_to_install_or_pass(no_torch: dict[str, str]) -> None:
    result = subprocess.run(
        [*TRANSDUCE, "serve", "--port", "0"], env=no_torch, capture_output=True, text=True, timeout=120
    )
    line = one_line_error(result)
    assert "pip install 'transduce[torch]' --extra-index-url https://download.pytorch.org/whl/cpu" in line
    assert "--model DIR" in line


@pytest.mark.parametrize(
    "args",
    [
        ["translate", "--source", "en", "--target", "de"],
        ["eval", "--tsv", "dev.tsv", "--source", "en", "--target", "de"],
        ["bench", "load", "--requests", "1"],
    ],
    ids=["translate", "eval", "bench-load"],
)
def test_every_command_that_needs_the_shipped_model_says_what_to_install_or_pass(
    no_torch: dict[str, str], args: list[str], tmp_path: Path
) -> None:
    (tmp_path / "dev.tsv").write_text("en\tde\nHello.\tHallo.\n")
    result = subprocess.run(
        [*TRANSDUCE, *args], env=no_torch, capture_output=True, text=True, timeout=120, input="Hello.\n", cwd=tmp_path
    )
    line = one_line_error(result)
    assert line.startswith(f"transduce {args[0]}: ") and "--model DIR" in line
    assert "pip install 'transduce[torch]'" in line


def test_export_without_torch_says_what_to_install(
    no_torch: dict[str, str], tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    command = [*TRANSDUCE, "export", str(tiny_checkpoint), str(out)]
    line = one_line_error(subprocess.run(command, env=no_torch, capture_output=True, text=True, timeout=120))
    assert line.startswith("transduce export: needs torch, which is not installed: pip install 'transduce[torch]'")
    assert not out.exists()


def test_a_current_export_of_the_shipped_model_is_served_without_torch(
    no_torch: dict[str, str], tiny_checkpoint: Path, tiny_model_dir: Path
) -> None:
    env = {
        **no_torch,
        "TRANSDUCE_DEFAULT_CHECKPOINT": str(tiny_checkpoint),
        "TRANSDUCE_DEFAULT_EXPORT_DIR": str(tiny_model_dir),
    }
    code = (
        "import sys; from transduce.shipped import resolve_model_dir; "
        "print(resolve_model_dir(None)); print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(tiny_model_dir), "False"]


def test_a_port_in_use_is_one_line_before_the_model_loads(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        missing = tmp_path / "no-such-model"  # loading it would fail with another message
        command = [*TRANSDUCE, "serve", "--model", str(missing), "--port", str(port)]
        line = one_line_error(subprocess.run(command, capture_output=True, text=True, timeout=120))
    assert line.startswith(f"transduce serve: cannot listen on 127.0.0.1:{port}: ") and "in use" in line


def test_a_fatal_signal_in_the_server_leaves_a_line_on_stderr() -> None:
    """transduce serve's crash traces (``enable_crash_traces``, called before it serves): a bus error, as a served
    model's weights file truncated under the server gives, prints where the process was instead of vanishing."""
    code = (
        "import os, signal\n"
        "from transduce.serve_cli import enable_crash_traces\n"
        "enable_crash_traces()\n"
        "os.kill(os.getpid(), signal.SIGBUS)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "Fatal Python error: Bus error" in result.stderr, result.stderr
