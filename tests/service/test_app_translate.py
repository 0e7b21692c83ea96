"""POST /translate through the real app and lifespan over a fake translator: shapes, splitting, limits, errors."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fakes import FakeTranslator, fake_translation, serve

from engine.errors import InputTooLongError

pytestmark = pytest.mark.anyio
EN_DE = {"source": "en", "target": "de"}


async def test_json_string_and_list() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "Hello big world.", **EN_DE, "format": "text", "api_key": ""})
        assert r.status_code == 200, r.text
        assert r.json() == {"translatedText": "WORLD. BIG HELLO"}
        r = await client.post("/translate", json={"q": ["one two", "three"], **EN_DE})
        assert r.json() == {"translatedText": ["TWO ONE", "THREE"]}
    assert fake.translated[1:] == ["Hello big world.", "one two", "three"]  # [0] is the start-up canary


async def test_form_encoded_and_multipart() -> None:
    async with serve() as (client, _):
        r = await client.post("/translate", data={"q": "guten tag", "source": "de", "target": "en", "api_key": ""})
        assert r.status_code == 200 and r.json() == {"translatedText": "TAG GUTEN"}
        r = await client.post("/translate", content=b"q=a+b&q=c&source=en&target=de",
                              headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.json() == {"translatedText": ["B A", "C"]}  # a repeated q is a list
        r = await client.post("/translate", data={"q": "x y", **EN_DE}, files={"unused": ("f.txt", b"data")})
        assert r.status_code == 200 and r.json() == {"translatedText": "Y X"}


async def test_sentences_are_translated_one_by_one_and_rejoined_with_their_whitespace() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "  One two.  Three four.\n\nFive", **EN_DE})
    assert r.json()["translatedText"] == "TWO. ONE  FOUR. THREE\n\nFIVE"
    assert fake.calls[1:] == [["One two.", "Three four.", "Five"]]  # one submit, one batch


async def test_blank_items_come_back_empty_without_decoding() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": ["", "  \n\t", "a b"], **EN_DE})
        assert r.json() == {"translatedText": ["", "", "B A"]}
        r = await client.post("/translate", json={"q": "   ", **EN_DE, "alternatives": 2})
        assert r.json() == {"translatedText": "", "alternatives": ["", ""]}
    assert fake.translated[1:] == ["a b"]


async def test_alternatives_ask_for_n_plus_one_hypotheses() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "a b. c d", **EN_DE, "alternatives": 2})
        assert r.json() == {"translatedText": "B. A D C",
                            "alternatives": [f"{fake_translation('a b.', k)} {fake_translation('c d', k)}"
                                             for k in (1, 2)]}
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (3, 4)
        r = await client.post("/translate", json={"q": ["x", "y"], **EN_DE, "alternatives": 1, "beam_size": 1})
        assert r.json() == {"translatedText": ["X", "Y"], "alternatives": [["X #1"], ["Y #1"]]}
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (2, 2)  # beam raised to fit
        await client.post("/translate", json={"q": "x", **EN_DE, "beam_size": 6})
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (1, 6)


async def test_languages_in_libretranslate_shape() -> None:
    fake = FakeTranslator(pairs=[("en", "de"), ("de", "en"), ("fr", "en"), ("en", "fr")])
    async with serve(fake) as (client, _):
        r = await client.get("/languages")
    assert r.json() == [{"code": "de", "name": "German", "targets": ["en"]},
                        {"code": "en", "name": "English", "targets": ["de", "fr"]},
                        {"code": "fr", "name": "French", "targets": ["en"]}]


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"q": "x" * 5001, **EN_DE}, 413, "request (5001 characters) exceeds the limit of 5000 characters (max_chars)"),
    ({"q": ["x" * 100] * 49 + ["x" * 101], **EN_DE}, 413, "5001 characters"),  # summed over the list
    ({"q": ["a"] * 51, **EN_DE}, 400, "q has 51 texts, over the limit of 50 (max_items)"),
    ({"q": "w " * 300, **EN_DE}, 400, "a sentence has 301 tokens, over the limit of 200 (max_sentence_tokens)"),
    ({"q": "x", **EN_DE, "beam_size": 9}, 400, "max_beam_size"),
    ({"q": "x", **EN_DE, "alternatives": 6}, 400, "max_alternatives"),
    ({"q": "x", "source": "en", "target": "fr"}, 400, "en->fr is not supported"),
    ({"q": "x", "source": "en", "target": "en"}, 400, "both 'en'"),
    ({"q": "x", "source": "auto", "target": "de"}, 400, "source=auto"),
    ({"q": "x", **EN_DE, "format": "html"}, 400, "format=html is not supported yet"),
    ({"q": [], **EN_DE}, 400, "empty list"),
])
async def test_limits_and_bad_fields(body: dict[str, Any], status: int, message: str) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json=body)
    assert (r.status_code, list(r.json())) == (status, ["error"]), r.text
    assert message in r.json()["error"]
    assert len(fake.calls) == 1  # only the canary: nothing over a limit reaches the engine, nothing is truncated


@pytest.mark.parametrize(("content", "ctype", "status", "message"), [
    (b'{"q": "x", "source": ', "application/json", 422, "not valid JSON"),
    (b"\xff\xfe\x00garbage", "application/json", 422, "not valid JSON"),
    (b'{"q": 5, "source": "en", "target": "de"}', "application/json", 422, "q"),
    (b'{"q": ["ok", 3], "source": "en", "target": "de"}', "application/json", 422, "q"),
    (b'{"q": {"a": 1}, "source": "en", "target": "de"}', "application/json", 422, "q"),
    (b'{"source": "en", "target": "de"}', "application/json", 422, "q: Field required"),
    (b'{"q": "x", "source": "en", "target": "de", "alternatives": "many"}', "application/json", 422, "alternatives"),
    (b'{"q": "x", "source": "en", "target": "de", "alternatives": -1}', "application/json", 422, "alternatives"),
    (b'"just a string"', "application/json", 422, "JSON object"),
    (b'{"q": ' + b"[" * 20000 + b"]" * 20000 + b', "source": "en", "target": "de"}', "application/json", 422, ""),
    (b"alternatives=x&q=a&source=en&target=de", "application/x-www-form-urlencoded", 422, "alternatives"),
    (b"source=en&target=de", "application/x-www-form-urlencoded", 422, "q"),
    (b"--nope\r\ngarbage", "multipart/form-data; boundary=nope", 422, ""),
    (b"q=x&source=en&target=de", "text/plain", 415, "content type"),
    (b"q=x&source=en&target=de", "", 415, "content type"),
])
async def test_malformed_bodies_are_4xx_json(content: bytes, ctype: str, status: int, message: str) -> None:
    async with serve() as (client, _):
        r = await client.post("/translate", content=content, headers={"content-type": ctype} if ctype else {})
    assert r.status_code == status, r.text
    assert list(r.json()) == ["error"] and message in r.json()["error"]


async def test_engine_errors_are_mapped_and_the_server_keeps_serving(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTranslator()
    fake.fail_on = {"long one": InputTooLongError("a sentence has 999 tokens; the model accepts at most 512"),
                    "boom": RuntimeError("engine exploded")}
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "long one", **EN_DE})
        assert r.status_code == 400 and "512" in r.json()["error"]
        with caplog.at_level(logging.ERROR, logger="transduce.service"):
            r = await client.post("/translate", json={"q": "boom", **EN_DE}, headers={"X-Request-ID": "req-500"})
        assert (r.status_code, r.json(), r.headers["x-request-id"]) == (500, {"error": "internal error"}, "req-500")
        assert any("req-500" in rec.getMessage() and rec.exc_info for rec in caplog.records)
        r = await client.post("/translate", json={"q": "still fine", **EN_DE})
        assert r.json() == {"translatedText": "FINE STILL"}


async def test_model_length_limit_is_checked_before_queueing() -> None:
    fake = FakeTranslator()
    fake.max_source_tokens = 4  # type: ignore[attr-defined]
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "one two three four five", **EN_DE})
        assert r.status_code == 400 and "the model's limit of 4" in r.json()["error"]
        assert (await client.post("/translate", json={"q": "one two", **EN_DE})).status_code == 200
    assert "one two three four five" not in fake.translated  # never queued, so it cannot fail a shared batch


async def test_more_sentences_than_the_queue_holds_is_413_not_500() -> None:
    async with serve(max_queue_items=10) as (client, _):
        r = await client.post("/translate", json={"q": "A. " * 11, **EN_DE})
    assert r.status_code == 413 and "11 sentences" in r.json()["error"] and "max_queue_items" in r.json()["error"]


async def test_openapi_describes_the_real_request() -> None:
    async with serve() as (client, _):
        spec = (await client.get("/openapi.json")).json()
        assert (await client.get("/docs")).status_code == 200
    op = spec["paths"]["/translate"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-www-form-urlencoded", "multipart/form-data"}
    request = spec["components"]["schemas"]["TranslateRequest"]
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/TranslateRequest"}
    assert set(request["required"]) == {"q", "source", "target"}
    assert {"type": "array", "items": {"type": "string"}} in request["properties"]["q"]["anyOf"]
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/TranslateResponse")
    assert {"400", "401", "403", "413", "422", "503", "504"} <= set(op["responses"])
