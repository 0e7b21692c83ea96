"""The translation cache (hits, never across options, LRU, metrics), CORS (off by default, preflight answered)
and the API docs served without a CDN."""

from __future__ import annotations

import re

import pytest

from tests.service.harness import EN_DE, FakeTranslator, serve
from transduce.engine.options import DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.service.cache import TranslationCache

pytestmark = pytest.mark.anyio


async def test_repeated_sentences_come_from_the_cache_and_options_never_mix() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        first = await client.post("/translate", json={"q": "Open file. Save file.", **EN_DE})
        again = await client.post("/translate", json={"q": ["Save file.", "Open file."], **EN_DE})
        assert again.json()["translatedText"] == ["FILE. SAVE", "FILE. OPEN"]
        assert first.json() == {"translatedText": "FILE. OPEN FILE. SAVE"}
        n_calls = len(fake.calls)
        await client.post("/translate", json={"q": "Save file.", **EN_DE, "beam_size": 2})  # other options: decoded
        await client.post("/translate", json={"q": "Save file.", **EN_DE, "alternatives": 1})
        await client.post("/translate", json={"q": "Save file.", "source": "de", "target": "en"})  # other pair
        assert fake.translated[-3:] == ["Save file."] * 3 and len(fake.calls) == n_calls + 3
        latency = (await client.get("/latency")).json()
        metrics = (await client.get("/metrics")).text
    assert fake.translated.count("Open file.") == 1  # decoded once, then served from the cache
    # 2 hits, 5 misses of these requests + the start-up canary (a miss, now cached)
    assert latency["cache"] == {"entries": 6, "capacity": 10_000, "hits": 2, "misses": 6, "hit_ratio": 0.25}
    assert re.search(r"^transduce_cache_hits_total 2\.0$", metrics, re.M)
    assert re.search(r"^transduce_cache_misses_total 6\.0$", metrics, re.M)
    assert re.search(r"^transduce_cache_entries 6\.0$", metrics, re.M)
    assert re.search(r"^transduce_cache_hit_ratio 0\.25$", metrics, re.M)


async def test_cache_size_zero_turns_it_off() -> None:
    fake = FakeTranslator()
    async with serve(fake, cache_size=0) as (client, _):
        for _ in range(2):
            await client.post("/translate", json={"q": "Open file.", **EN_DE})
        latency = (await client.get("/latency")).json()
    assert fake.translated.count("Open file.") == 2
    assert latency["cache"]["hits"] == latency["cache"]["misses"] == 0


def test_the_least_recently_used_entry_goes_first_and_long_ones_take_the_room_of_several() -> None:
    cache = TranslationCache(2)
    result = TranslationResult(["x"], [[1]])
    keys = [("en", "de", DecodeOptions(), text) for text in ("a", "b", "c")]
    cache.put(keys[0], result)
    cache.put(keys[1], result)
    assert cache.get(keys[0]) == TranslationResult(["x"], [])  # a is now the most recently used; its text alone kept
    cache.put(keys[2], result)
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is not None and len(cache) == 2
    cache = TranslationCache(3)  # 1,200 characters at most
    long = [("en", "de", DecodeOptions(), text * 560) for text in "pqrs"]  # 580 characters each with "y" * 10 x 2
    for key in long[:3]:
        cache.put(key, TranslationResult(["y" * 10, "z" * 10], [list(range(10))] * 2))
    assert len(cache) == 2 and cache.get(long[0]) is None  # three entries would hold 1,740 characters
    cache.put(long[3], TranslationResult(["y" * 700], [[1]]))  # alone over half of them: not kept, nothing pushed out
    assert len(cache) == 2 and cache.get(long[3]) is None and cache.get(long[2]) is not None
    with pytest.raises(ValueError, match="cache size"):
        TranslationCache(-1)


async def test_cors_is_off_by_default_and_answers_preflights_when_configured() -> None:
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    async with serve() as (client, _):
        r = await client.options("/translate", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    async with serve(cors_origins="https://app.example, https://other.example") as (client, _):
        r = await client.options("/translate", headers={**preflight, "Access-Control-Request-Headers": "content-type"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in r.headers["access-control-allow-methods"]
        r = await client.post("/translate", json={"q": "Hi.", **EN_DE}, headers={"Origin": "https://app.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = await client.options("/translate", headers={**preflight, "Origin": "https://evil.example"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        assert r.json() == {
            "error": "CORS preflight refused: origin not allowed (see cors_origins; the API takes GET and POST)"
        }
        r = await client.options(
            "/translate",
            headers={**preflight, "Origin": "https://evil.example", "Access-Control-Request-Method": "PUT"},
        )
        assert r.status_code == 400 and "origin, method not allowed" in r.json()["error"]
    async with serve(cors_origins="*") as (client, _):
        r = await client.post("/translate", json={"q": "Hi.", **EN_DE}, headers={"Origin": "https://any.example"})
        assert r.headers["access-control-allow-origin"] == "*"


async def test_the_api_docs_work_offline() -> None:
    """/docs and /redoc load their scripts and styles from the server itself, never from a CDN."""
    async with serve() as (client, _):
        for page in ("/docs", "/redoc"):
            html = (await client.get(page)).text
            assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css|png))"', html)
            assert assets and all(a.startswith("/") for a in assets), (page, assets)
            for asset in assets:
                r = await client.get(asset)
                assert r.status_code == 200 and len(r.content) > 1000, asset
        assert (await client.get("/openapi.json")).json()["info"]["title"] == "transduce"
