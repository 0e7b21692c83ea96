"""The HTTP API through the real app and its lifespan, over the tiny exported model."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest
from fakes import post_then_hang_up

from engine.options import DecodeOptions
from engine.translator import Translator
from service.config import Settings
from service.main import create_app

pytestmark = pytest.mark.anyio
SENTENCES = ["Hello world.", "The cat sees the dog.", "A big red house.", "Good night, old world!"]


def alone(translator: Translator, text: str, beam: int = 4, n: int = 1) -> list[str]:
    options = DecodeOptions(beam_size=beam, num_hypotheses=n)
    return translator.translate([text], source_lang="en", target_lang="de", options=options)[0].hypotheses


async def test_translate_json_string_list_and_form(make_client: Any, tiny_translator: Translator) -> None:
    async with make_client() as client:
        r = await client.post("/translate", json={"q": "Hello world.", "source": "en", "target": "de"})
        assert r.status_code == 200, r.text
        assert r.json() == {"translatedText": alone(tiny_translator, "Hello world.")[0]}
        r = await client.post("/translate", json={"q": SENTENCES, "source": "en", "target": "de", "format": "text"})
        assert r.json()["translatedText"] == [alone(tiny_translator, s)[0] for s in SENTENCES]
        r = await client.post("/translate", data={"q": "A big red house.", "source": "en", "target": "de"})
        assert r.status_code == 200 and r.json()["translatedText"] == alone(tiny_translator, "A big red house.")[0]
        r = await client.post("/translate", json={"q": "Tag", "source": "de", "target": "en", "beam_size": 1})
        assert r.json()["translatedText"] == tiny_translator.translate(
            ["Tag"], source_lang="de", target_lang="en", options=DecodeOptions(beam_size=1))[0].hypotheses[0]


async def test_sentences_are_split_and_rejoined(make_client: Any, tiny_translator: Translator) -> None:
    text = "Hello world. The cat sees the dog.\nA big red house."
    async with make_client() as client:
        r = await client.post("/translate", json={"q": text, "source": "en", "target": "de"})
    parts = [alone(tiny_translator, s)[0] for s in ("Hello world.", "The cat sees the dog.", "A big red house.")]
    assert r.json()["translatedText"] == f"{parts[0]} {parts[1]}\n{parts[2]}"


async def test_alternatives_and_blank_items(make_client: Any, tiny_translator: Translator) -> None:
    async with make_client() as client:
        r = await client.post("/translate", json={"q": "Hello world.", "source": "en", "target": "de",
                                                  "alternatives": 2})
        body = r.json()
        expected = alone(tiny_translator, "Hello world.", beam=4, n=3)
        assert body == {"translatedText": expected[0], "alternatives": expected[1:]}
        r = await client.post("/translate", json={"q": ["", "  ", "Hello world."], "source": "en", "target": "de"})
        assert r.json()["translatedText"][:2] == ["", ""]


async def test_languages_health_ready_and_request_id(make_client: Any) -> None:
    async with make_client() as client:
        langs = (await client.get("/languages")).json()
        assert langs == [{"code": "de", "name": "German", "targets": ["en"]},
                         {"code": "en", "name": "English", "targets": ["de"]}]
        assert (await client.get("/health")).json() == {"status": "ok"}
        ready = await client.get("/health/ready")
        assert ready.status_code == 200 and ready.json()["model"] == "tiny-random"
        r = await client.get("/health", headers={"X-Request-ID": "abc-123"})
        assert r.headers["x-request-id"] == "abc-123"
        generated = (await client.get("/health")).headers["x-request-id"]
        assert len(generated) == 32
        assert (await client.get("/docs")).status_code == 200


async def test_not_ready_without_lifespan() -> None:
    app = create_app(Settings(), translator_factory=lambda _: None)  # type: ignore[arg-type,return-value]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/health")).status_code == 200
        r = await client.get("/health/ready")
        assert r.status_code == 503 and "error" in r.json()
        r = await client.post("/translate", json={"q": "x", "source": "en", "target": "de"})
        assert r.status_code == 503 and r.headers["retry-after"]


@pytest.mark.parametrize(("body", "status", "fragment"), [
    ({"q": "x", "source": "en", "target": "fr"}, 400, "en->fr is not supported"),
    ({"q": "x", "source": "xx", "target": "de"}, 400, "not supported"),
    ({"q": "x", "source": "en", "target": "en"}, 400, "both 'en'"),
    ({"q": "x", "source": "auto", "target": "de"}, 400, "source=auto"),
    ({"q": "<b>x</b>", "source": "en", "target": "de", "format": "html"}, 400, "format=html"),
    ({"q": [], "source": "en", "target": "de"}, 400, "empty list"),
    ({"q": ["a"] * 51, "source": "en", "target": "de"}, 400, "max_items"),
    ({"q": "a" * 5001, "source": "en", "target": "de"}, 413, "exceeds the limit of 5000 characters"),
    ({"q": "word " * 400, "source": "en", "target": "de"}, 400, "max_sentence_tokens"),
    ({"q": "x", "source": "en", "target": "de", "beam_size": 50}, 400, "max_beam_size"),
    ({"q": "x", "source": "en", "target": "de", "alternatives": 9}, 400, "max_alternatives"),
    ({"q": 5, "source": "en", "target": "de"}, 422, "invalid request"),
    ({"q": ["ok", 3], "source": "en", "target": "de"}, 422, "invalid request"),
    ({"source": "en", "target": "de"}, 422, "q"),
    ({"q": "x", "source": "en", "target": "de", "format": "pdf"}, 422, "format"),
    ([1, 2], 422, "JSON object"),
])
async def test_bad_input_gets_a_clear_4xx(make_client: Any, body: Any, status: int, fragment: str) -> None:
    async with make_client() as client:
        r = await client.post("/translate", json=body)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]


async def test_malformed_bodies(make_client: Any) -> None:
    async with make_client(max_body_bytes=10_000) as client:
        r = await client.post("/translate", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and "not valid JSON" in r.json()["error"]
        r = await client.post("/translate", content=b"q=x", headers={"content-type": "text/plain"})
        assert r.status_code == 415 and "content type" in r.json()["error"]
        deep = "[" * 100_000 + "]" * 100_000
        r = await client.post("/translate", content=deep.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 413  # over max_body_bytes before it is even parsed
    async with make_client() as client:
        deep = '{"q": ' + "[" * 50_000 + "]" * 50_000 + ', "source": "en", "target": "de"}'
        r = await client.post("/translate", content=deep.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 422
        r = await client.post("/translate", content=b'{"q": "\\ud800 x", "source": "en", "target": "de"}',
                              headers={"content-type": "application/json"})
        assert r.status_code == 200 and isinstance(r.json()["translatedText"], str)


async def test_api_keys(make_client: Any) -> None:
    async with make_client(api_keys="k1, k2") as client:
        body = {"q": "Hello world.", "source": "en", "target": "de"}
        r = await client.post("/translate", json=body)
        assert r.status_code == 401 and "API key" in r.json()["error"]
        r = await client.post("/translate", json={**body, "api_key": "nope"})
        assert r.status_code == 403 and r.json() == {"error": "invalid API key"}
        assert (await client.post("/translate", json={**body, "api_key": "k2"})).status_code == 200
        assert (await client.post("/translate", data={**body, "api_key": "k1"})).status_code == 200
        r = await client.post("/translate", json=body, headers={"Authorization": "Bearer k1"})
        assert r.status_code == 200
        assert (await client.get("/health/ready")).status_code == 200  # health stays open
        assert (await client.get("/metrics")).status_code == 200
    async with make_client(api_keys="k1", protect_health=True) as client:
        assert (await client.get("/metrics")).status_code == 401


async def test_queue_full_gives_503_with_retry_after(make_client: Any, make_gated: Any) -> None:
    gate = threading.Event()
    gated = make_gated()
    async with make_client(translator=gated, max_queue_items=2, max_batch_size=1, max_wait_ms=0) as client:
        gated.gate = gate  # only after start-up: the canary must not block
        gated.entered.clear()
        body = {"source": "en", "target": "de"}
        first = asyncio.create_task(client.post("/translate", json={**body, "q": "Hello world."}))
        await asyncio.to_thread(gated.entered.wait, 10)  # the worker holds "Hello world."
        second = asyncio.create_task(client.post("/translate", json={**body, "q": ["A big red house.", "Tag"]}))
        await asyncio.sleep(0.2)
        r = await client.post("/translate", json={**body, "q": "Good night, old world!"})
        assert r.status_code == 503 and "queue is full" in r.json()["error"]
        assert int(r.headers["retry-after"]) >= 1
        gate.set()
        assert (await first).status_code == 200 and (await second).status_code == 200


async def test_deadline_gives_504(make_client: Any, make_gated: Any) -> None:
    gate = threading.Event()
    gated = make_gated()
    async with make_client(translator=gated, request_timeout_s=0.3, max_batch_size=1, max_wait_ms=0) as client:
        gated.gate = gate  # only after start-up: the canary must not block
        gated.entered.clear()
        body = {"source": "en", "target": "de"}
        first = asyncio.create_task(client.post("/translate", json={**body, "q": "Hello world."}))
        await asyncio.to_thread(gated.entered.wait, 10)
        r = await client.post("/translate", json={**body, "q": "A big red house."})
        assert r.status_code == 504 and "request_timeout_s" in r.json()["error"]
        gate.set()
        await first
    assert ["A big red house."] not in gated.calls  # the timed-out sentence was never decoded


async def test_client_disconnect_drops_queued_work(make_client: Any, make_gated: Any) -> None:
    gate = threading.Event()
    gated = make_gated()
    async with make_client(translator=gated, max_batch_size=1, max_wait_ms=0) as client:
        app = client.app  # type: ignore[attr-defined]
        gated.gate = gate  # only after start-up: the canary must not block
        gated.entered.clear()
        first = asyncio.create_task(client.post("/translate", json={"q": "Hello world.", "source": "en",
                                                                    "target": "de"}))
        await asyncio.to_thread(gated.entered.wait, 10)
        call, gone = post_then_hang_up(app, {"q": "The cat sees the dog.", "source": "en", "target": "de"})
        await asyncio.sleep(0.3)
        pipeline = app.state.transduce.pipeline
        assert pipeline.batcher.queue_depth == 1
        gone.set()
        await asyncio.wait_for(call, 5)
        assert pipeline.batcher.queue_depth == 0
        gate.set()
        await first
    assert ["The cat sees the dog."] not in gated.calls


async def test_concurrent_requests_are_batched(make_client: Any, make_gated: Any, tiny_translator: Translator) -> None:
    gated = make_gated()
    texts = [f"{s[:-1]} {i}" for i in range(4) for s in SENTENCES]  # one sentence each
    async with make_client(translator=gated, max_wait_ms=50) as client:
        calls_before = len(gated.calls)
        responses = await asyncio.gather(*(client.post("/translate", json={"q": t, "source": "en", "target": "de"})
                                           for t in texts))
        engine_calls = len(gated.calls) - calls_before
        latency = (await client.get("/latency")).json()
        metrics = (await client.get("/metrics")).text
    assert engine_calls <= 4, engine_calls  # 16 requests, far fewer engine calls
    assert [r.json()["translatedText"] for r in responses] == [alone(tiny_translator, t)[0] for t in texts]
    assert latency["count"] >= 16 and latency["batch_size"]["max"] > 1
    assert set(latency["total_ms"]) == {"p50", "p90", "p99", "max"} and "queue_ms" in latency
    assert 'transduce_requests_total{status="200"}' in metrics
    for name in ("transduce_request_duration_seconds_bucket", "transduce_queue_wait_seconds_count",
                 "transduce_inference_seconds_sum", "transduce_queue_depth", "transduce_batch_size_bucket",
                 "transduce_generated_tokens_total", "transduce_padding_ratio"):
        assert name in metrics


@pytest.mark.parametrize("text", [
    "Hello\x00world\x07 \x1b[31mred\x1b[0m",  # control characters
    "zero\u200bwidth\u200djoiner\ufeff",  # zero-width characters and a BOM
    "Hello Мир 世界 مرحبا",  # mixed scripts
    "I love it 😀👍🏽 🇩🇪",  # emoji, skin tone, flag
    "שלום עולם! مرحبا بالعالم",  # right-to-left text
    "<p>Hello <b>world</b></p><script>alert(1)</script>",  # HTML sent as format=text
    "a" * 1000,  # a 1,000-character single "word"
    "\u0301\u0301\u0301",  # lone combining marks
    "   leading and trailing   ",
])
async def test_weird_but_valid_text_translates_or_passes(make_client: Any, text: str) -> None:
    async with make_client() as client:
        r = await client.post("/translate", json={"q": text, "source": "en", "target": "de", "format": "text"})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert isinstance(r.json()["translatedText"], str)
    else:
        assert "max_sentence_tokens" in r.json()["error"]  # the one limit such text may hit: named, not truncated


async def test_10000_character_word(make_client: Any) -> None:
    async with make_client(max_chars=20_000) as client:
        unknown = await client.post("/translate", json={"q": "x" * 10_000, "source": "en", "target": "de"})
        known = await client.post("/translate", json={"q": "hello" * 2_000, "source": "en", "target": "de"})
    assert unknown.status_code == 200  # one unknown piece: translated (bounded by source length + 50)
    assert known.status_code == 400 and "max_sentence_tokens" in known.json()["error"]  # thousands of pieces
    async with make_client() as client:
        r = await client.post("/translate", json={"q": "x" * 10_000, "source": "en", "target": "de"})
    assert r.status_code == 413 and "max_chars" in r.json()["error"]


def test_access_log_is_one_json_line() -> None:
    import logging

    from service.logging import JsonFormatter

    record = logging.LogRecord("transduce.access", logging.INFO, __file__, 1, "translate %s", (200,), None)
    record.fields = {"request_id": "abc", "status": 200, "queue_ms": 1.5}  # type: ignore[attr-defined]
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert {k: parsed[k] for k in ("msg", "request_id", "status", "queue_ms")} == {
        "msg": "translate 200", "request_id": "abc", "status": 200, "queue_ms": 1.5}
