"""Language detection through the real app: source=auto per item of q (detectedLanguage, pass-through of texts
already in the target language, low confidence without evidence) and POST /detect in LibreTranslate's shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.service.harness import FakeTranslator, fake_translation, serve
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions
from transduce.engine.results import TranslationResult

pytestmark = pytest.mark.anyio

EN = "Thank you very much for your help."
FR = "Merci beaucoup pour votre aide."
DE = "Wie geht es dir?"


class DirectionsTranslator(FakeTranslator):
    """The fake, also recording the language pair of every translate call."""

    def __init__(self, pairs: Sequence[tuple[str, str]] = (("de", "en"), ("en", "de"))) -> None:
        super().__init__(pairs)
        self.directions: list[tuple[str, str, list[str]]] = []

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        self.directions.append((source_lang, target_lang, list(texts)))
        return super().translate(texts, source_lang=source_lang, target_lang=target_lang, options=options)


async def test_auto_detects_each_item_translates_it_from_its_language_and_passes_the_target_language_through() -> None:
    fake = DirectionsTranslator(pairs=[("en", "de"), ("fr", "de"), ("de", "en"), ("de", "fr")])
    async with serve(fake) as (client, _):
        r = await client.post(
            "/translate",
            json={"q": [EN, FR, f"  {DE}\n", ""], "source": "auto", "target": "de", "alternatives": 1},
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translatedText"] == [fake_translation(EN), fake_translation(FR), f"  {DE}\n", ""]
    assert body["alternatives"] == [[fake_translation(EN, 1)], [fake_translation(FR, 1)], [], []]  # passed: none
    detected = body["detectedLanguage"]
    assert [d["language"] for d in detected] == ["en", "fr", "de", "en"]
    assert min(d["confidence"] for d in detected[:3]) > 90 and detected[3]["confidence"] == 0  # a blank: no evidence
    assert sorted(fake.directions[1:]) == [("en", "de", [EN]), ("fr", "de", [FR])]  # German is never decoded


async def test_auto_with_one_text_answers_one_detected_language() -> None:
    async with serve(DirectionsTranslator()) as (client, _):
        r = await client.post("/translate", json={"q": DE, "source": "auto", "target": "en"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"translatedText", "detectedLanguage"} and body["translatedText"] == fake_translation(DE)
    assert body["detectedLanguage"]["language"] == "de" and 90 < body["detectedLanguage"]["confidence"] <= 100


@pytest.mark.parametrize("auto", ["AUTO", "Auto"])
async def test_auto_in_any_case_detects(auto: str) -> None:
    """A language code's case means nothing: ``AUTO`` is ``auto`` (it was read as a language, and refused)."""
    async with serve(DirectionsTranslator()) as (client, _):
        r = await client.post("/translate", json={"q": DE, "source": auto, "target": "EN"})
    assert r.status_code == 200, r.text
    assert r.json()["detectedLanguage"]["language"] == "de"
    assert r.json()["translatedText"] == fake_translation(DE)


async def test_a_word_without_evidence_gets_confidence_zero_and_is_translated_not_passed_through() -> None:
    fake = DirectionsTranslator()
    async with serve(fake) as (client, _):
        for target, source in (("de", "en"), ("en", "de")):
            r = await client.post("/translate", json={"q": "The", "source": "auto", "target": target})
            assert r.json() == {"translatedText": "THE", "detectedLanguage": {"language": source, "confidence": 0.0}}
        detections = {word: (await client.post("/detect", json={"q": word})).json() for word in ("The", "123", "Hund")}
        sentence = (await client.post("/detect", json={"q": "The cat sees the dog in the garden."})).json()
    assert [d[0] for d in fake.directions[1:]] == ["en", "de"]
    for word, ranked in detections.items():  # still a language of the model, but said to be a guess
        assert {d["language"] for d in ranked} == {"de", "en"} and ranked[0]["confidence"] < 50, (word, ranked)
    assert sentence[0] == {"language": "en", "confidence": sentence[0]["confidence"]} and sentence[0]["confidence"] > 90


async def test_emoji_and_symbols_are_no_evidence_of_a_language() -> None:
    """py3langid's byte n-grams of emoji are noise: "😀😀 👍" came out German at 20 % confidence."""
    async with serve(DirectionsTranslator()) as (client, _):
        emoji = (await client.post("/detect", json={"q": "😀😀 👍 ➡ €"})).json()
        auto = (await client.post("/translate", json={"q": "😀😀 👍", "source": "auto", "target": "de"})).json()
        mixed = (await client.post("/detect", json={"q": "😀😀 👍 The cat sees the dog in the garden. 🐕"})).json()
    assert emoji == [{"language": "en", "confidence": 0.0}, {"language": "de", "confidence": 0.0}]  # as LibreTranslate
    assert auto == {"translatedText": "😀😀 👍", "detectedLanguage": {"language": "en", "confidence": 0.0}}
    assert mixed[0]["language"] == "en" and mixed[0]["confidence"] > 90
    flag = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"  # England's: tag characters
    async with serve(DirectionsTranslator()) as (client, _):
        flagged = (await client.post("/detect", json={"q": "Danke " + flag * 5})).json()  # was Chinese, at 51
    assert flagged[0]["language"] == "de" and flagged[0]["confidence"] > 50


@pytest.mark.parametrize(
    ("pairs", "body", "message"),
    [
        (
            [("en", "de"), ("de", "en")],
            {"q": EN, "source": "auto", "target": "fr"},
            "source=auto: the model does not translate into 'fr' (it translates into de, en; see /languages)",
        ),
        (
            [("xx", "de"), ("de", "xx")],
            {"q": EN, "source": "auto", "target": "de"},
            "source=auto: language detection does not know xx (the languages the model translates into 'de' from): "
            "name the source language",
        ),
    ],
    ids=["target-not-produced", "sources-unknown-to-detection"],
)
async def test_auto_refusals_are_400_in_our_words(
    pairs: list[tuple[str, str]], body: dict[str, Any], message: str
) -> None:
    fake = FakeTranslator(pairs=pairs)
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json=body)
    assert (r.status_code, r.json()) == (400, {"error": message})
    assert len(fake.calls) == 1  # only the canary


async def test_auto_shares_the_cache_of_the_detected_language() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        explicit = await client.post("/translate", json={"q": EN, "source": "en", "target": "de"})
        auto = await client.post("/translate", json={"q": EN, "source": "auto", "target": "de"})
    assert auto.json()["translatedText"] == explicit.json()["translatedText"]
    assert fake.translated.count(EN) == 1  # the second came from the cache, keyed by the real source language


async def test_a_mixed_list_is_checked_against_max_queue_items_as_a_whole() -> None:
    fake = DirectionsTranslator(pairs=[("en", "de"), ("fr", "de")])
    async with serve(fake, max_queue_items=3) as (client, _):
        q = ["Thank you very much. See you tomorrow.", "Merci beaucoup. A demain mon ami."]  # 2 + 2 sentences
        r = await client.post("/translate", json={"q": q, "source": "auto", "target": "de"})
    assert r.status_code == 413 and "4 sentences" in r.json()["error"], r.text
    assert fake.directions[1:] == []  # neither language's sentences were decoded


async def test_detect_in_libretranslate_shape() -> None:
    async with serve(FakeTranslator(pairs=[("en", "de"), ("fr", "de"), ("de", "en")])) as (client, _):
        by_json = await client.post("/detect", json={"q": FR, "api_key": ""})
        by_form = await client.post("/detect", data={"q": DE})
        joined = await client.post("/detect", json={"q": ["Guten Morgen.", "Wie geht es dir?"]})
        spec = (await client.get("/openapi.json")).json()
    for r, best in ((by_json, "fr"), (by_form, "de"), (joined, "de")):
        assert r.status_code == 200, r.text
        ranked = r.json()
        assert [set(d) for d in ranked] == [{"language", "confidence"}] * 3  # every language of the model
        assert ranked[0]["language"] == best and ranked[0]["confidence"] > 90
        confidences = [d["confidence"] for d in ranked]
        assert confidences == sorted(confidences, reverse=True) and all(0 <= c <= 100 for c in confidences)
    operation = spec["paths"]["/detect"]["post"]
    assert set(operation["requestBody"]["content"]) == {
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    }


async def test_detect_counts_a_lists_texts_as_translate_does() -> None:
    """A list's characters are its texts' (not the newlines that join them for detection), within max_items."""
    async with serve() as (client, _):
        r = await client.post("/detect", json={"q": ["x" * 100] * 50})  # 5,000 characters, as /translate takes
        assert r.status_code == 200, r.text
        r = await client.post("/detect", json={"q": ["x" * 100] * 50 + ["y"]})
        assert r.status_code == 400 and r.json() == {"error": "q has 51 texts, over the limit of 50 (max_items)"}
        r = await client.post("/detect", json={"q": ["x" * 1000] * 5 + ["y"]})
        assert r.status_code == 413 and "request (5001 characters)" in r.json()["error"], r.text


async def test_detect_asks_for_the_api_key_when_keys_are_set() -> None:
    async with serve(api_keys="k1") as (client, _):
        assert (await client.post("/detect", data={"q": DE})).status_code == 401
        assert (await client.post("/detect", data={"q": DE, "api_key": "nope"})).status_code == 403
        r = await client.post("/detect", data={"q": DE, "api_key": "k1"})
    assert r.status_code == 200 and r.json()[0]["language"] == "de"


@pytest.mark.parametrize(
    ("content", "ctype", "status", "message"),
    [
        (b'{"q": "  "}', "application/json", 400, "q is empty: send the text whose language to detect"),
        (b"api_key=", "application/x-www-form-urlencoded", 422, "invalid request: q is required"),
        (b'{"q": "' + b"x" * 5001 + b'"}', "application/json", 413, "request (5001 characters) exceeds the limit"),
        (b'{"q": 5}', "application/json", 422, "q must be a text or a list of texts, not the number 5"),
        (b'["x"]', "application/json", 422, "body must be a JSON object with q"),
        (b'{"q": ', "application/json", 422, "body is not valid JSON"),
        (b"q=x", "text/plain", 415, "unsupported content type 'text/plain'"),
    ],
)
async def test_detect_refusals_are_4xx_in_our_words(content: bytes, ctype: str, status: int, message: str) -> None:
    async with serve() as (client, _):
        r = await client.post("/detect", content=content, headers={"content-type": ctype})
    assert (r.status_code, list(r.json())) == (status, ["error"]), r.text
    assert message in r.json()["error"]
