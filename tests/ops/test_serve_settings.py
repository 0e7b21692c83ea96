"""`transduce serve`'s settings and start-up: settings that cannot work are refused in one line before the model loads;
a server that could never serve exits; SIGHUP does not kill a server of one model; the log says where it listens."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.service.harness import IsolatedSettings

TRANSDUCE = [sys.executable, "-m", "transduce"]


def serve_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSDUCE_")}
    return {**env, "TRANSDUCE_LOG_JSON": "false", **extra}


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"max_wait_ms": float("inf")}, "max_wait_ms\n  Value error, must be a finite number, got inf"),
        ({"shutdown_grace_s": float("inf")}, "must be a finite number, got inf"),
        ({"max_wait_ms": 30_000.0}, "max_wait_ms 30000 is not below request_timeout_s 30 s"),
        ({"api_keys": " , ,"}, "api_keys names no key"),
        ({"protect_health": True}, "protect_health needs api_keys"),
        ({"memory_budget_mb": 10.0}, "memory_budget_mb applies to several models"),
        ({"canary_text": "  --- "}, "canary_text '  --- ' has no letters"),
        ({"cors_origins": "https://ok.example, app.example"}, "cors_origins has 'app.example', which is not an origin"),
        ({"cors_origins": "https://*.example.com"}, "no wildcards inside a name"),
        ({"intra_threads": 9}, "intra_threads\n  Value error, 9 is over 4 x the 2 cores this process may use"),
        ({"engine_replicas": 1000}, "1000 is over 4 x the 2 cores"),
        ({"file_ttl_s": float("inf")}, "file_ttl_s\n  Value error, must be at most 31536000 seconds (a year), got inf"),
        ({"backlog": 2**31}, "backlog\n  Value error, must be at most 65535"),
        ({"max_beam_size": 100_000}, "max_beam_size\n  Value error, must be at most 64"),
        ({"host": " "}, "host\n  Value error, must name an address to listen on"),
    ],
)
def test_settings_that_cannot_work_are_refused(
    bad: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("transduce.engine.session.usable_cores", lambda: 2)
    with pytest.raises(ValueError, match=re.escape(message)):
        IsolatedSettings(**bad)  # type: ignore[arg-type]


def test_settings_that_can_work_still_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("transduce.engine.session.usable_cores", lambda: 2)
    settings = IsolatedSettings(
        max_wait_ms=29_999.0,
        api_keys="k1",
        protect_health=True,
        cors_origins="*, http://localhost:8080, null",
        intra_threads=8,  # over the cores: a warning in the log (bench load runs 1 and 2 threads on any machine)
        engine_replicas=2,
        files_dir=str(tmp_path / "made-later"),
        memory_budget_mb=100.0,
        models=str(tmp_path),
    )
    assert settings.origins == ["*", "http://localhost:8080", "null"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match="files_dir .* is a file: name a directory"):
        IsolatedSettings(files_dir=str(afile))


def test_start_up_faults_are_one_line(tiny_model_dir: Path, tmp_path: Path) -> None:
    cases = [  # env, exit status, stderr
        (
            {"TRANSDUCE_MODEL_DIR": str(tiny_model_dir), "TRANSDUCE_MAX_SENTENCE_TOKENS": "3"},
            2,
            "transduce serve: invalid setting canary_text: a sentence has",
        ),
        (  # every model fails: it exited 3 with a traceback, or stayed up unready for ever
            {"TRANSDUCE_MODELS": f"{tmp_path / 'missing'},{tiny_model_dir / 'manifest.json'}"},
            1,
            "transduce serve: no model can serve: missing: ",
        ),
        (
            {"TRANSDUCE_MODELS": f"{tiny_model_dir},{tiny_model_dir}"},
            1,
            f"transduce serve: models (TRANSDUCE_MODELS) names two directories called '{tiny_model_dir.name}'",
        ),
        (
            {"TRANSDUCE_SHUTDOWN_GRACE_S": "inf"},
            2,
            "transduce serve: invalid setting shutdown_grace_s: must be a finite",
        ),
    ]
    for env, status, start in cases:
        result = subprocess.run(
            [*TRANSDUCE, "serve", "--port", "0"], env=serve_env(**env), capture_output=True, text=True, timeout=120
        )
        lines = [line for line in result.stderr.splitlines() if line.startswith("transduce serve:")]
        assert result.returncode == status and len(lines) == 1 and lines[0].startswith(start), result.stderr[-2000:]
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
    (tmp_path / ".env").write_bytes(b"TRANSDUCE_PORT=0\nTRANSDUCE_CANARY_TEXT=Caf\xe9\n")  # Latin-1: a traceback
    latin = subprocess.run(
        [*TRANSDUCE, "serve"], env=serve_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert (latin.returncode, latin.stderr) == (
        2,
        f"transduce serve: {tmp_path / '.env'} is not UTF-8 text (invalid continuation byte at byte 42): save it as "
        "UTF-8\n",
    )
    flag = subprocess.run([*TRANSDUCE, "serve", "--port", "abc"], capture_output=True, text=True, timeout=60)
    assert (flag.returncode, flag.stderr) == (
        2,
        "transduce serve: argument --port: invalid int value: 'abc' (see transduce serve --help)\n",
    )


@contextmanager
def serve_process(
    env: dict[str, str], log: Path, cwd: Path | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`transduce serve --port 0` with ``env``, its output in ``log``; yields the process and its URL (read from
    the log) once it listens; SIGTERM at the end must make it exit 0."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*TRANSDUCE, "serve", "--port", "0"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd
        )
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
            url = found.group(1) if found else None
            time.sleep(0.1)
        assert url is not None, log.read_text()
        yield proc, url
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def wait_for_line(log: Path, text: str, timeout_s: float = 10.0) -> None:
    """Until ``text`` is in ``log``; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"{text!r} not logged: {log.read_text()[-2000:]}"
        time.sleep(0.05)


def test_sighup_leaves_a_server_of_one_model_serving(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SIGHUP (systemctl reload, a closed terminal) killed it at once, dropping accepted requests. Also: the log names
    the address it listens on (with --port 0, the only way to learn it) and warns of a TRANSDUCE_* typo."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    env = serve_env(TRANSDUCE_MODEL_DIR=str(model), TRANSDUCE_API_KEY="secret")
    log = tmp_path / "serve.log"
    (tmp_path / ".env").write_text("TRANSDUCE_REQ_LIMT=10\nTRANSDUCE_DEFAULT_EXPORT_DIR=/x\n")  # warned of too
    with serve_process(env, log, tmp_path) as (proc, url):
        assert httpx.get(f"{url}/health/ready").status_code == 200
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None and httpx.get(f"{url}/health/ready").status_code == 200
    text = log.read_text()
    assert "SIGHUP ignored: one model (model_dir) has nothing to rescan" in text
    assert "TRANSDUCE_API_KEY is not a setting, ignored (did you mean TRANSDUCE_API_KEYS?)" in text
    env_file = tmp_path.resolve() / ".env"
    assert f"TRANSDUCE_REQ_LIMT in {env_file} is not a setting, ignored (did you mean TRANSDUCE_REQ_LIMIT?)" in text
    assert f"TRANSDUCE_DEFAULT_EXPORT_DIR in {env_file} is read from the environment only, ignored" in text
    assert re.search(r"listening on http://127\.0\.0\.1:\d+; API keys: none, every client is served", text)
