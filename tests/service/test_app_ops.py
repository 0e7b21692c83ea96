"""Operations through the real app over the fake translator: readiness, draining, overload, deadlines, disconnects,
batching, API keys, request ids, metrics, latency, logs, settings and the serve command."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from asgi_lifespan import LifespanManager
from prometheus_client import CONTENT_TYPE_LATEST

from tests.service.harness import (
    EN_DE,
    FakeTranslator,
    Gate,
    build_app,
    live_server,
    post_then_hang_up,
    serve,
    wait_until,
)
from transduce.service.config import Settings

pytestmark = pytest.mark.anyio


async def test_ready_only_after_load_and_canary() -> None:
    fake, loaded = FakeTranslator(), threading.Event()

    def slow_load(_: Settings) -> FakeTranslator:
        assert loaded.wait(10)
        return fake

    app = build_app(factory=slow_load)
    manager = LifespanManager(app, startup_timeout=15)
    starting = asyncio.create_task(manager.__aenter__())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert (await client.get("/health")).json() == {"status": "ok"}  # liveness answers while loading
        r = await client.get("/health/ready")
        assert r.status_code == 503 and "loading" in r.json()["error"]
        r = await client.post("/translate", json={"q": "x", **EN_DE})
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        loaded.set()
        await starting
        r = await client.get("/health/ready")
        assert r.json() == {"status": "ready", "model": "fake-model", "provider": "CPUExecutionProvider"}
        latency = (await client.get("/latency")).json()
    await manager.__aexit__(None, None, None)
    assert fake.calls == [["Hello world."]] and fake.options[0].beam_size == 1  # the canary, greedy
    assert fake.langs == [("en", "de")]  # the English text from English, though de->en is the first pair
    assert (latency["batches"], latency["count"]) == (1, 0)  # it went through the batcher; it is not a request


async def test_failing_canary_fails_start_up() -> None:
    fake = FakeTranslator()
    fake.fail_on = {"Hello world.": RuntimeError("broken model")}
    app = build_app(fake)
    with pytest.raises(RuntimeError, match="broken model"):
        async with LifespanManager(app):
            pass
    assert app.state.transduce.ready is False


async def test_shutdown_drains_accepted_work_and_refuses_new() -> None:
    fake, gate = FakeTranslator(), Gate()
    app = build_app(fake, gate=gate)
    manager = LifespanManager(app)
    await manager.__aenter__()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        gate.hold()
        accepted = asyncio.create_task(client.post("/translate", json={"q": "accepted text", **EN_DE}))
        await gate.wait_entered()
        stopping = asyncio.create_task(manager.__aexit__(None, None, None))
        await wait_until(lambda: app.state.transduce.draining)
        r = await client.get("/health/ready")
        assert r.status_code == 503 and "shutting down" in r.json()["error"]
        r = await client.post("/translate", json={"q": "too late", **EN_DE})
        assert r.status_code == 503 and r.json() == {"error": "server is shutting down"}
        assert not stopping.done()  # still waiting for the accepted request
        gate.release()
        assert (await accepted).json() == {"translatedText": "TEXT ACCEPTED"}
        await asyncio.wait_for(stopping, 10)
    assert "too late" not in fake.translated


async def test_queue_full_is_503_with_retry_after() -> None:
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, max_queue_items=3, max_batch_size=1, max_wait_ms=0) as (client, app):
        gate.hold()
        first = asyncio.create_task(client.post("/translate", json={"q": "first", **EN_DE}))
        await gate.wait_entered()  # the worker holds "first"; the queue is empty
        second = asyncio.create_task(client.post("/translate", json={"q": "One. Two. Three", **EN_DE}))
        await wait_until(lambda: app.state.transduce.pipeline.queue.queue_depth == 3)
        r = await client.post("/translate", json={"q": "refused", **EN_DE})
        assert r.status_code == 503 and "queue is full" in r.json()["error"]
        assert int(r.headers["retry-after"]) >= 1
        gate.release()
        assert (await first).status_code == 200 and (await second).json() == {"translatedText": "ONE. TWO. THREE"}
    assert "refused" not in fake.translated


def test_retry_after_follows_queue_depth_over_throughput() -> None:
    from transduce.service.observability import LatencyWindow, Metrics
    from transduce.service.pipeline import StaticBatching, TranslationPipeline

    window = LatencyWindow()
    pipeline = TranslationPipeline(FakeTranslator(), Settings(scheduler="static"), Metrics(), window)
    assert pipeline.retry_after() == 1  # nothing measured yet
    window.add_batch(10, 1000.0, 10)  # 10 sentences finished in one busy second
    assert isinstance(pipeline.queue, StaticBatching)
    pipeline.queue.batcher._queue.extend([None] * 45)  # type: ignore[list-item]  # 45 waiting at 10 per second
    assert pipeline.retry_after() == 5
    window.add_batch(4, 1000.0, 0)  # a step of the running batch that finished nothing: 10 per 2 busy seconds
    assert pipeline.retry_after() == 10
    pipeline.queue.batcher._running.append([None] * 15)  # type: ignore[list-item]  # decoding: theirs comes first
    assert pipeline.retry_after() == 13  # (45 + 15) / 5 + 1 (the metrics probe saw 1 s for a 3 s drain)
    two = TranslationPipeline(FakeTranslator(), Settings(scheduler="static", engine_replicas=2), Metrics(), window)
    two.queue.batcher._queue.extend([None] * 45)  # type: ignore[attr-defined]
    assert two.retry_after() == 5  # two engines decode at once: 45 / (5 x 2) + 1
    with pytest.raises(ValueError, match="scheduler=step needs the engine's Translator"):
        TranslationPipeline(FakeTranslator(), Settings(scheduler="step"), Metrics(), window)


async def test_deadline_is_504_and_the_sentence_is_never_decoded() -> None:
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, request_timeout_s=0.2, max_batch_size=1, max_wait_ms=0) as (client, _):
        gate.hold()
        first = asyncio.create_task(client.post("/translate", json={"q": "first", **EN_DE}))
        await gate.wait_entered()
        r = await client.post("/translate", json={"q": "too slow", **EN_DE})
        assert r.status_code == 504 and "0.2 s (request_timeout_s)" in r.json()["error"]
        gate.release()
        assert (await first).status_code == 504  # its deadline passed too, while the engine held it
    assert "too slow" not in fake.translated


async def engine_held(client: httpx.AsyncClient, gate: Gate) -> asyncio.Task[httpx.Response]:
    """Send a request "first" and return once the engine holds it at the gate (its task: release, then await)."""
    gate.hold()
    first = asyncio.create_task(client.post("/translate", json={"q": "first", **EN_DE}))
    await gate.wait_entered()
    return first


async def test_a_static_batch_costs_source_tokens_times_beam() -> None:
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, max_batch_size=1, max_wait_ms=0) as (client, app):
        first = await engine_held(client, gate)
        text = "one two three four"
        second = asyncio.create_task(client.post("/translate", json={"q": text, "beam_size": 4, **EN_DE}))
        batcher = app.state.transduce.pipeline.queue.batcher
        await wait_until(lambda: batcher.queue_depth == 1)
        assert [item.cost for item in batcher._queue] == [4 * fake.count_tokens(text)]  # a batch holds fewer at beam 4
        gate.release()
        assert (await first).status_code == 200 and (await second).status_code == 200


async def test_client_disconnect_drops_queued_sentences() -> None:
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, max_batch_size=1, max_wait_ms=0) as (client, app):
        first = await engine_held(client, gate)
        call, hung_up = post_then_hang_up(app, {"q": "Gone. Away", **EN_DE})
        batcher = app.state.transduce.pipeline.queue
        await wait_until(lambda: batcher.queue_depth == 2)
        hung_up.set()
        await asyncio.wait_for(call, 5)
        assert batcher.queue_depth == 0  # dropped before the worker got to them
        gate.release()
        assert (await first).status_code == 200
    assert fake.translated[1:] == ["first"]


def test_a_client_gone_mid_upload_is_499_without_an_error_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeTranslator()
    with live_server(fake) as url:
        where = urlsplit(url)
        with socket.create_connection((where.hostname or "", where.port or 0)) as conn:
            conn.sendall(
                b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\nX-Request-ID: gone-1\r\nExpect: 100-continue\r\n\r\n"
            )
            assert conn.recv(1000).startswith(b"HTTP/1.1 100 ")  # sent when the app starts reading the body
            conn.sendall(b'{"q": "half a bo')
        deadline = time.monotonic() + 10
        while 'transduce_requests_total{status="499"} 1.0' not in (metrics := httpx.get(f"{url}/metrics").text):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.05)
    assert 'transduce_requests_total{status="500"}' not in metrics
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    access = [r for r in caplog.records if r.name == "transduce.access"]
    assert [(r.getMessage(), r.fields["request_id"]) for r in access] == [("translate 499", "gone-1")]  # type: ignore[attr-defined]
    assert fake.translated == ["Hello world."]  # only the canary


async def test_concurrent_requests_share_engine_calls() -> None:
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, max_wait_ms=0) as (client, app):
        gate.hold()
        first = asyncio.create_task(client.post("/translate", json={"q": "first", **EN_DE}))
        await gate.wait_entered()
        texts = [f"text number {i}" for i in range(12)]
        tasks = [
            asyncio.create_task(client.post("/translate", json={"q": t, **EN_DE, "beam_size": 1 + i % 2}))
            for i, t in enumerate(texts)
        ]
        await wait_until(lambda: app.state.transduce.pipeline.queue.queue_depth == 12)
        gate.release()
        responses = await asyncio.gather(first, *tasks)
        latency = (await client.get("/latency")).json()
    assert [r.json()["translatedText"] for r in responses[1:]] == [f"{i} NUMBER TEXT" for i in range(12)]
    assert len(fake.calls) == 4  # canary, "first", then one batch per beam size for the 12 requests
    assert {frozenset(call) for call in fake.calls[2:]} == {frozenset(texts[0::2]), frozenset(texts[1::2])}
    assert sorted(o.beam_size for o in fake.options[2:]) == [1, 2]  # different beams never share a batch
    assert latency["count"] == 13 and latency["batch_size"]["max"] == 6
    assert set(latency) >= {"total_ms", "queue_ms", "inference_ms", "batch_size", "count"}
    for key in ("total_ms", "queue_ms", "inference_ms"):
        assert set(latency[key]) == {"p50", "p90", "p99", "max"}
        assert 0 <= latency[key]["p50"] <= latency[key]["p90"] <= latency[key]["p99"] <= latency[key]["max"]
    assert latency["queue_ms"]["max"] > 0 and latency["batch_size"]["mean"] > 1


async def test_api_keys() -> None:
    async with serve(api_keys="k1, k2") as (client, _):
        body = {"q": "a b", **EN_DE}
        r = await client.post("/translate", json=body)
        assert r.status_code == 401 and "API key" in r.json()["error"]
        r = await client.post("/translate", json={**body, "api_key": "k3"})
        assert r.status_code == 403 and r.json() == {"error": "invalid API key"}
        r = await client.post("/translate", json=body, headers={"Authorization": "Bearer nope"})
        assert r.status_code == 403
        assert (await client.post("/translate", json={**body, "api_key": "k2"})).status_code == 200
        assert (await client.post("/translate", data={**body, "api_key": "k1"})).status_code == 200
        assert (await client.post("/translate", json=body, headers={"Authorization": "Bearer k1"})).status_code == 200
        for path in ("/health", "/health/ready", "/metrics", "/latency", "/languages", "/docs"):
            assert (await client.get(path)).status_code == 200, path
    async with serve(api_keys="k1", protect_health=True) as (client, _):
        for path in ("/health", "/health/ready", "/metrics", "/latency"):
            assert (await client.get(path)).status_code == 401, path
            assert (await client.get(path, headers={"Authorization": "Bearer k1"})).status_code == 200, path
        assert (await client.get("/languages")).status_code == 200


async def test_request_id_is_echoed_or_generated_on_every_response() -> None:
    async with serve() as (client, _):
        r = await client.get("/health", headers={"X-Request-ID": "abc-123"})
        assert r.headers["x-request-id"] == "abc-123"
        r = await client.post(
            "/translate", content=b"{", headers={"content-type": "application/json", "X-Request-ID": "bad-json-1"}
        )
        assert (r.status_code, r.headers["x-request-id"]) == (422, "bad-json-1")
        generated = {(await client.get(path)).headers["x-request-id"] for path in ("/health", "/languages", "/nope")}
        assert len(generated) == 3 and all(len(g) == 32 for g in generated)
        r = await client.get("/health", headers={"X-Request-ID": "no spaces or\nnewlines"})
        assert len(r.headers["x-request-id"]) == 32  # an unsafe id is replaced, not echoed into logs


async def test_metrics_are_prometheus_text_per_app() -> None:
    async with serve() as (client, _), serve() as (other, _):
        await client.post("/translate", json={"q": "a b c", **EN_DE})
        await client.post("/translate", json={"q": "a b c", "source": "en", "target": "xx"})
        r = await client.get("/metrics")
        other_text = (await other.get("/metrics")).text
    assert r.headers["content-type"] == CONTENT_TYPE_LATEST
    text = r.text
    assert 'transduce_requests_total{status="200"} 1.0' in text
    assert 'transduce_requests_total{status="400"} 1.0' in text
    assert "transduce_requests_total{" not in other_text  # each app has its own registry
    assert "transduce_batch_size_count 2.0" in text  # the canary and the one request
    assert "transduce_generated_tokens_total 7.0" in text  # the fake's tokens: one per word, plus eos each
    for name in (
        "transduce_request_duration_seconds_bucket",
        "transduce_queue_wait_seconds_count",
        "transduce_inference_seconds_sum",
        "transduce_batch_size_bucket",
        "transduce_queue_depth 0.0",
        "transduce_padding_ratio 0.0",  # the fake has no engine stats; the tiny-model test sees a real ratio
    ):
        assert name in text


async def test_one_access_log_line_per_translate_request(caplog: pytest.LogCaptureFixture) -> None:
    from transduce.service.logging import JsonFormatter

    caplog.set_level(logging.INFO, logger="transduce.access")
    async with serve() as (client, _):
        await client.get("/health")
        await client.post("/translate", json={"q": ["a b.", "c"], **EN_DE}, headers={"X-Request-ID": "log-1"})
        await client.post("/translate", json={"q": "x", "source": "en", "target": "fr"})
    records = [r for r in caplog.records if r.name == "transduce.access"]
    assert len(records) == 2
    lines = [JsonFormatter().format(r) for r in records]
    assert all("\n" not in line for line in lines)
    ok, bad = (json.loads(line) for line in lines)
    assert (ok["logger"], ok["msg"], bad["msg"]) == ("transduce.access", "translate 200", "translate 400")
    assert {k: ok[k] for k in ("request_id", "n_items", "n_chars", "status")} == {
        "request_id": "log-1",
        "n_items": 2,
        "n_chars": 5,
        "status": 200,
    }
    assert all(isinstance(ok[k], float) and ok[k] >= 0 for k in ("queue_ms", "inference_ms", "total_ms"))
    assert bad["status"] == 400 and bad["queue_ms"] is None


def test_configure_logging_installs_json_lines() -> None:
    from transduce.service.logging import JsonFormatter, configure_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging(json_lines=True)
        assert [type(h.formatter) for h in root.handlers] == [JsonFormatter]
        configure_logging(json_lines=False)
        assert not isinstance(root.handlers[0].formatter, JsonFormatter)
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


def test_settings_from_env_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRANSDUCE_MAX_CHARS", "123")
    monkeypatch.setenv("TRANSDUCE_API_KEYS", " a, b ,,")
    settings = Settings()
    assert (settings.max_chars, settings.keys, settings.port, settings.request_timeout_s) == (
        123,
        frozenset({"a", "b"}),
        5000,
        30.0,
    )
    assert settings.max_tokens_in_flight == 0  # auto: the device's budget (engine.options.TOKENS_IN_FLIGHT_*)
    for bad in (
        {"max_batch_size": 0},
        {"max_wait_ms": -1},
        {"request_timeout_s": 0},
        {"port": 70000},
        {"device": "tpu"},
        {"max_alternatives": -1},
        {"max_connections": 0},
        {"keep_alive_timeout_s": 0},
        {"request_read_timeout_s": 0},
        {"backlog": 0},
        {"log_throttle_s": -1},
        {"max_tokens_in_flight": -1},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Settings(**bad)


def test_cli_flags_override_env_and_a_missing_model_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from transduce import serve_cli as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    monkeypatch.setenv("TRANSDUCE_PORT", "1234")
    monkeypatch.setenv("TRANSDUCE_MAX_WAIT_MS", "7")
    settings = cli.settings_from_args(parser.parse_args(["--port", "999", "--device", "cpu"]))
    assert (settings.port, settings.max_wait_ms, settings.device) == (999, 7.0, "cpu")
    assert cli.run(parser.parse_args(["--max-batch-size", "0"])) == 2
    assert "invalid setting max_batch_size" in capsys.readouterr().err
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        status = cli.run(parser.parse_args(["--model", str(tmp_path / "missing"), "--no-log-json"]))
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("transduce serve: cannot load the model") and err.count("\n") == 1


async def test_head_is_answered_like_get_without_a_body() -> None:
    async with serve(FakeTranslator()) as (client, _):
        for path in ("/health", "/health/ready", "/languages", "/"):
            got, head = await client.get(path), await client.head(path)
            assert head.status_code == got.status_code == 200, path
            assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"], path
        head = await client.head("/translate")  # a POST route: HEAD is as wrong as GET
        assert head.status_code == (await client.get("/translate")).status_code == 405
