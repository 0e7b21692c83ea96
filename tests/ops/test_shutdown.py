"""SIGTERM mid-burst: every request the server accepted gets its full translation, then the process exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.service.harness import free_port, wait_ready
from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.translator import Translator

# 60 different texts in letters the tiny model spells (its vocabulary has no digits: a number would be kept as written,
# not translated, and the answers would differ from the engine's own below)
WORDS = ["red", "blue", "green", "small", "big", "old"]
TEXTS = [
    f"The small blue dog runs to the {a} {b} {c} house and sees the water" for a in WORDS for b in WORDS for c in WORDS
][:60]


def sigterm_mid_burst(
    tiny_model_dir: Path, bodies: list[dict[str, object]], **env: str
) -> tuple[list[httpx.Response | BaseException], int, str]:
    """Serve the tiny model, post ``bodies`` at once, SIGTERM the server half a second later: the answers (or
    errors), the exit status and the log."""
    port = free_port()
    environ = {**os.environ, "TRANSDUCE_MODEL_DIR": str(tiny_model_dir), "TRANSDUCE_PORT": str(port), **env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "transduce", "serve"], env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout_s=60)

        async def burst() -> list[httpx.Response | BaseException]:
            async with httpx.AsyncClient(base_url=url, timeout=120) as client:
                tasks = [asyncio.create_task(client.post("/translate", json=body)) for body in bodies]
                await asyncio.sleep(0.5)  # all requests are on the wire; only a few batches are done
                proc.send_signal(signal.SIGTERM)
                return await asyncio.gather(*tasks, return_exceptions=True)

        results = asyncio.run(burst())
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    return results, proc.returncode, out.decode()


def test_sigterm_drains_accepted_requests(tiny_model_dir: Path, tiny_translator: Translator) -> None:
    bodies: list[dict[str, object]] = [{"q": t, "source": "en", "target": "de"} for t in TEXTS]
    results, status, log = sigterm_mid_burst(
        tiny_model_dir,
        bodies,
        TRANSDUCE_MAX_BATCH_SIZE="4",
        TRANSDUCE_SHUTDOWN_GRACE_S="60",
        TRANSDUCE_LOG_JSON="true",
    )
    assert status == 0, log[-2000:]
    accepted = [(t, r) for t, r in zip(TEXTS, results, strict=True) if isinstance(r, httpx.Response)]
    assert len(accepted) == len(TEXTS), [r for r in results if not isinstance(r, httpx.Response)][:3]
    expected = tiny_translator.translate(
        [t for t, _ in accepted],
        source_lang="en",
        target_lang="de",
        options=DecodeOptions(no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE),
    )
    for (_, response), want in zip(accepted, expected, strict=True):
        assert response.status_code == 200, response.text
        assert response.json()["translatedText"] == want.hypotheses[0]
    assert "draining" in log


def test_requests_the_grace_cuts_off_get_a_json_503_not_a_500(tiny_model_dir: Path) -> None:
    """uvicorn cancelled what was still running when the grace ended (500 in plain text, a traceback each), and a
    grace of a fraction of a second was cut to 0."""
    # seconds of work, decoded sentence by sentence
    body = {"q": ". ".join(TEXTS[:40]), "source": "en", "target": "de", "beam_size": 8}
    results, status, log = sigterm_mid_burst(
        tiny_model_dir,
        [body] * 6,
        TRANSDUCE_MAX_BATCH_SIZE="1",
        TRANSDUCE_ENGINE_REPLICAS="1",
        TRANSDUCE_CACHE_SIZE="0",
        TRANSDUCE_SHUTDOWN_GRACE_S="0.01",
        TRANSDUCE_LOG_JSON="false",
    )
    assert status == 0, log[-2000:]
    statuses = [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in results]
    assert 503 in statuses and set(statuses) <= {200, 503}, statuses
    for r in results:
        assert isinstance(r, httpx.Response) and (
            r.status_code == 200 or r.json() == {"error": "server is shutting down"}
        )
    assert "up to 0.01 s" in log and "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
