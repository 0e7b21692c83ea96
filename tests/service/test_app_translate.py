"""POST /translate through the real app and lifespan over the fake translator: shapes, splitting, limits, errors.

What needs the real engine (its output through the app, texts only a real tokenizer makes hard) is in
test_app_tiny_model.py."""

from __future__ import annotations

import gzip
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.service.harness import EN_DE, FakeTranslator, IsolatedSettings, fake_translation, serve
from transduce.engine.errors import InputTooLongError

pytestmark = pytest.mark.anyio


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
        r = await client.post(
            "/translate",
            content=b"q=a+b&q=c&source=en&target=de",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert r.json() == {"translatedText": ["B A", "C"]}  # a repeated q is a list
        r = await client.post(  # any other field sent twice: its first value, as LibreTranslate reads a form
            "/translate",
            content=b"q=a+b&source=en&target=de&target=en",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert r.json() == {"translatedText": "B A"}
        r = await client.post("/translate?q=a+b&source=en&source=de&target=de")  # the query string's, alike
        assert r.json() == {"translatedText": "B A"}
        r = await client.post("/translate", data={"q": "x y", **EN_DE}, files={"unused": ("f.txt", b"data")})
        assert r.status_code == 200 and r.json() == {"translatedText": "Y X"}


async def test_sentences_without_a_letter_come_back_as_they_are_without_decoding() -> None:
    """A number, punctuation, symbols or control characters: the model would only make something up for them."""
    fake = FakeTranslator()
    q = ["123", "10:30 – 11:45", "\x07\x08", "!!! ???", "Hello world. 42.", "<3 ;-)"]
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "alternatives": 1})
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == ["123", "10:30 – 11:45", "\x07\x08", "!!! ???", "WORLD. HELLO 42.", "<3 ;-)"]
    assert r.json()["alternatives"][0] == []  # no other reading of it
    assert fake.translated[1:] == ["Hello world."]  # the only sentence with a letter


async def test_a_source_that_is_the_target_comes_back_as_sent_without_decoding() -> None:
    """As LibreTranslate answers it (a client translating everything into its reader's language sends these)."""
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": [" Hello world. ", "Hi"], "source": "en", "target": "EN"})
        html = await client.post(
            "/translate", json={"q": "<p>Hi <b>you</b>", "source": "de", "target": "de", "format": "html"}
        )
        alternatives = await client.post(
            "/translate", json={"q": "Hi", "source": "en", "target": "en", "alternatives": 2}
        )
    assert r.status_code == 200, r.text
    assert r.json() == {"translatedText": [" Hello world. ", "Hi"]}
    assert html.json() == {"translatedText": "<p>Hi <b>you</b>"}  # as sent, not re-serialised by the parser
    assert alternatives.json() == {"translatedText": "Hi", "alternatives": []}  # no other reading, never a repeat
    assert fake.translated[1:] == []  # nothing decoded


async def test_alternatives_never_repeat_the_translation_or_each_other() -> None:
    """n-best lists that read alike once joined (here: "#k" only on sentences with letters) and texts passed through
    give fewer alternatives, as LibreTranslate's do, rather than repeats."""
    async with serve(FakeTranslator()) as (client, _):
        r = await client.post("/translate", json={"q": ["1234", "Hi. 42.", ""], **EN_DE, "alternatives": 2})
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == ["1234", "HI. 42.", ""]
    assert r.json()["alternatives"] == [[], ["HI. #1 42.", "HI. #2 42."], []]


async def test_language_codes_in_any_case_are_the_servers_own() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "Hello world.", "source": "EN", "target": "De"})
        assert r.status_code == 200, r.text
        assert r.json() == {"translatedText": "WORLD. HELLO"}
        r = await client.post("/translate", json={"q": "x", "source": "EN", "target": "FR"})
        # EN read as en, FR matches no language the server knows and is named as sent
        assert r.status_code == 400 and "en->FR is not supported" in r.json()["error"]
        r = await client.post("/translate", json={"q": "x", "source": "XX", "target": "de"})
        assert r.status_code == 400 and "XX" in r.json()["error"]  # no language of that name: named as sent
    assert fake.translated[1:] == ["Hello world."]


async def test_a_form_of_many_fields_is_read_in_linear_time() -> None:
    """Each field's values were gathered by scanning every pair of the form, on the event loop: a 130 KB form body of
    20,000 names held every request for 8.8 s (a 1 MB one: minutes)."""
    import time

    form = {"content-type": "application/x-www-form-urlencoded"}
    body = "q=hi&source=en&target=de&" + "&".join(f"k{i}" for i in range(20_000)) + "&target=en&q=there"
    async with serve(FakeTranslator()) as (client, _):
        started = time.perf_counter()
        r = await client.post("/translate", content=body.encode(), headers=form)
        elapsed = time.perf_counter() - started
    assert r.status_code == 200 and r.json() == {"translatedText": ["HI", "THERE"]}, r.text  # q twice; target once
    assert elapsed < 3  # 0.15 s here


async def test_form_bodies_and_query_strings_are_read_as_utf8() -> None:
    """Raw UTF-8 in a form body (`curl -d 'q=schöne Grüße'`) and percent-escaped UTF-8 read the same; another charset
    is honoured when the Content-Type names it; bytes that are not text in it are a 422, never dropped or garbled."""
    fake = FakeTranslator()
    form = {"content-type": "application/x-www-form-urlencoded"}
    async with serve(fake) as (client, _):
        r = await client.post("/translate", content="q=schöne Grüße 😀&source=de&target=en".encode(), headers=form)
        assert r.status_code == 200 and r.json() == {"translatedText": "😀 GRÜSSE SCHÖNE"}, r.text
        r = await client.post("/translate", content=b"q=sch%C3%B6ne+Gr%C3%BC%C3%9Fe&source=de&target=en", headers=form)
        assert r.json() == {"translatedText": "GRÜSSE SCHÖNE"}
        latin1 = {"content-type": "application/x-www-form-urlencoded; charset=ISO-8859-1"}
        r = await client.post(
            "/translate", content="q=schöne Tage&source=de&target=en".encode("latin-1"), headers=latin1
        )
        assert r.json() == {"translatedText": "TAGE SCHÖNE"}
        r = await client.post("/translate?q=sch%C3%B6n&source=de&target=en")
        assert r.json() == {"translatedText": "SCHÖN"}
        for content in (b"q=Hello%ff%fe.&source=en&target=de", b"q=Hello\xff.&source=en&target=de"):
            r = await client.post("/translate", content=content, headers=form)
            assert r.status_code == 422 and r.json() == {
                "error": "the form body is not utf-8 text (its percent-escapes included)"
            }, r.text
        r = await client.post("/translate?q=Hello%ff&source=en&target=de")
        assert r.status_code == 422 and "query string is not utf-8 text" in r.json()["error"]
        odd = {"content-type": "application/x-www-form-urlencoded; charset=klingon"}
        r = await client.post("/translate", content=b"q=a&source=en&target=de", headers=odd)
        assert r.status_code == 415 and r.json() == {
            "error": "unsupported charset 'klingon': send the form body as UTF-8"
        }
    assert fake.translated[1:] == ["schöne Grüße 😀", "schöne Grüße", "schöne Tage", "schön"]


def _multipart(fields: list[tuple[str, bytes]], *, close: bool = True) -> bytes:
    parts = [b'--B\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (k.encode(), v) for k, v in fields]
    return b"".join(parts) + (b"--B--\r\n" if close else b"")


@pytest.mark.parametrize("path", ["/translate", "/detect"])
async def test_multipart_bodies_are_read_as_strictly_as_urlencoded_ones(path: str) -> None:
    """A multipart body cut short (its closing boundary never came) is a 422, not the parts before the cut; a field
    that is not text in the body's charset is a 422 and an unknown charset a 415, as for urlencoded forms (Starlette's
    parser would read either as Latin-1); a named charset is honoured."""
    fake = FakeTranslator()
    multipart = {"content-type": "multipart/form-data; boundary=B"}
    fields = [("q", "Grüße aus Köln".encode()), ("source", b"de"), ("target", b"en")]
    cut = _multipart([*fields, ("q", b"Second text that is cu")], close=False)
    async with serve(fake) as (client, _):
        r = await client.post(path, content=_multipart(fields), headers=multipart)
        assert r.status_code == 200, r.text
        r = await client.post(path, content=cut, headers=multipart)
        assert r.status_code == 422 and r.json() == {
            "error": "the multipart body ends before its closing boundary: it was cut short, send it whole"
        }, r.text
        bad = _multipart([("q", b"Gr\xc3\xbc\xc3\x9fe \xff"), *fields[1:]])
        r = await client.post(path, content=bad, headers=multipart)
        assert r.status_code == 422 and r.json() == {
            "error": "the form field 'q' is not utf-8 text: send the form as utf-8"
        }, r.text
        odd = {"content-type": "multipart/form-data; boundary=B; charset=foo"}
        r = await client.post(path, content=_multipart(fields), headers=odd)
        assert r.status_code == 415 and r.json() == {"error": "unsupported charset 'foo': send the form body as UTF-8"}
        latin1 = {"content-type": "multipart/form-data; boundary=B; charset=ISO-8859-1"}
        r = await client.post(path, content=_multipart([("q", "Grüße".encode("latin-1")), *fields[1:]]), headers=latin1)
        assert r.status_code == 200, r.text
        empty = {"content-type": "multipart/form-data; boundary=B; charset="}  # UTF-8, not Starlette's Latin-1
        r = await client.post(path, content=bad, headers=empty)
        assert r.status_code == 422 and "is not utf-8 text" in r.json()["error"], r.text
        own = b'--B\r\nContent-Disposition: form-data; name="q"\r\nContent-Type: text/plain; charset=latin-1\r\n\r\n'
        own += "Köln".encode("latin-1") + b"\r\n" + _multipart(fields[1:])  # a part's own charset (RFC 7578 4.4)
        r = await client.post(path, content=own, headers=multipart)
        assert r.status_code == 200, r.text
        r = await client.post(path, content=_multipart([*fields, *[("x", b"1")] * 1000]), headers=multipart)
        assert r.status_code == 422 and r.json() == {
            "error": "the multipart body cannot be read: it has too many fields (at most 1,000)"
        }, r.text
    if path == "/translate":
        assert fake.translated[1:] == ["Grüße aus Köln", "Grüße", "Köln"]
    else:
        assert fake.translated[1:] == []


async def test_fields_in_the_query_string_and_an_unset_format_as_libretranslate_reads_them() -> None:
    async with serve() as (client, _):
        r = await client.post("/translate?q=a+b&q=c&source=en&target=de&alternatives=0")  # no body, no content type
        assert r.status_code == 200 and r.json() == {"translatedText": ["B A", "C"]}, r.text
        form = {"content-type": "application/x-www-form-urlencoded"}
        r = await client.post("/translate?q=a+b&source=en&target=de", content=b"target=fr", headers=form)
        assert r.status_code == 200 and r.json() == {"translatedText": "B A"}, r.text  # the query string's field wins
        parts = [  # a file is no field, even before the field of its name (as werkzeug reads a form)
            b'Content-Disposition: form-data; name="target"; filename="t.txt"\r\n\r\nfr',
            b'Content-Disposition: form-data; name="target"\r\n\r\nde',
            b'Content-Disposition: form-data; name="q"\r\n\r\na b',
            b'Content-Disposition: form-data; name="source"\r\n\r\nen',
        ]
        body = b"".join(b"--xyz\r\n" + part + b"\r\n" for part in parts) + b"--xyz--\r\n"
        multipart = {"content-type": "multipart/form-data; boundary=xyz"}
        r = await client.post("/translate", content=body, headers=multipart)
        assert r.status_code == 200 and r.json() == {"translatedText": "B A"}, r.text
        r = await client.post("/translate?q=a&source=en&target=de", content=b"stray")  # a body needs its type
        assert r.status_code == 415 and "query string" in r.json()["error"]
        for unset in (None, ""):
            r = await client.post("/translate", json={"q": "a b", **EN_DE, "format": unset})
            assert r.status_code == 200 and r.json() == {"translatedText": "B A"}, r.text


async def test_sentences_are_translated_one_by_one_and_rejoined_with_their_whitespace() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "  One two.  Three four.\n\nFive\t", **EN_DE})
    assert r.json()["translatedText"] == "  TWO. ONE  FOUR. THREE\n\nFIVE\t"
    assert fake.calls[1:] == [["One two.", "Three four.", "Five"]]  # one submit, one batch


async def test_leading_and_trailing_whitespace_of_each_text_is_kept() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        texts = ["  Hello world.  ", "\tTabbed line\n", "\u00a0no-break", "plain", "\u200f Right to left. \u200f"]
        r = await client.post("/translate", json={"q": texts, **EN_DE, "alternatives": 1})
    assert r.json() == {
        "translatedText": [
            "  WORLD. HELLO  ",
            "\tLINE TABBED\n",
            "\u00a0NO-BREAK",
            "PLAIN",
            "\u200f LEFT. TO RIGHT \u200f",
        ],
        "alternatives": [
            ["  WORLD. HELLO #1  "],
            ["\tLINE TABBED #1\n"],
            ["\u00a0NO-BREAK #1"],
            ["PLAIN #1"],
            ["\u200f LEFT. TO RIGHT #1 \u200f"],
        ],
    }
    # the engine sees no padding (nor the marks around a text, which its tokenizer would drop)
    assert fake.translated[1:] == ["Hello world.", "Tabbed line", "no-break", "plain", "Right to left."]


async def test_blank_items_come_back_as_they_were_without_decoding() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": ["", "  \n\t", "a b"], **EN_DE})
        assert r.json() == {"translatedText": ["", "  \n\t", "B A"]}
        r = await client.post("/translate", json={"q": "   ", **EN_DE, "alternatives": 2})
        assert r.json() == {"translatedText": "   ", "alternatives": []}
    assert fake.translated[1:] == ["a b"]


async def test_alternatives_ask_for_n_plus_one_hypotheses() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "a b. C d", **EN_DE, "alternatives": 2})
        assert r.json() == {
            "translatedText": "B. A D C",
            "alternatives": [f"{fake_translation('a b.', k)} {fake_translation('C d', k)}" for k in (1, 2)],
        }
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (3, 4)
        r = await client.post("/translate", json={"q": ["x", "y"], **EN_DE, "alternatives": 1, "beam_size": 2})
        assert r.json() == {"translatedText": ["X", "Y"], "alternatives": [["X #1"], ["Y #1"]]}
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (2, 2)
        await client.post("/translate", json={"q": "x", **EN_DE, "alternatives": 5})
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (6, 6)  # no beam_size: default raised
        await client.post("/translate", json={"q": "x", **EN_DE, "beam_size": 6})
        assert (fake.options[-1].num_hypotheses, fake.options[-1].beam_size) == (1, 6)


@pytest.mark.parametrize(
    ("alternatives", "beam_size", "message"),
    [
        (5, 1, "alternatives 5 needs beam_size 6 or more, but beam_size is 1"),
        (4, 4, "alternatives 4 needs beam_size 5 or more, but beam_size is 4"),
        (1, 1, "a beam of 1 keeps the best translation and at most 0 alternatives"),
    ],
)
async def test_alternatives_not_below_a_given_beam_size_is_400_naming_both(
    alternatives: int, beam_size: int, message: str
) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        body = {"q": "x", **EN_DE, "alternatives": alternatives, "beam_size": beam_size}
        r = await client.post("/translate", json=body)
    assert (r.status_code, list(r.json())) == (400, ["error"]) and message in r.json()["error"]
    assert len(fake.calls) == 1  # never widened and decoded anyway


async def test_a_default_beam_widened_past_max_beam_size_is_400() -> None:
    async with serve(max_beam_size=4, max_alternatives=5) as (client, _):
        r = await client.post("/translate", json={"q": "x", **EN_DE, "alternatives": 4})
    assert r.status_code == 400
    assert r.json() == {"error": "alternatives 4 needs a beam of 5, over the limit of 4 (max_beam_size)"}


async def test_the_alternatives_a_page_is_told_of_fit_the_largest_beam() -> None:
    """max_alternatives 5 with max_beam_size 2 advertised 5; 2 alternatives were refused (they need a beam of 3)."""
    async with serve(max_beam_size=2, default_beam_size=1) as (client, _):
        assert (await client.get("/frontend/settings")).json()["max_alternatives"] == 1


def test_a_default_beam_over_max_beam_size_is_refused_when_the_settings_are_made() -> None:
    with pytest.raises(ValueError, match="default_beam_size 5 is over max_beam_size 4: lower default_beam_size"):
        IsolatedSettings(default_beam_size=5, max_beam_size=4)
    assert IsolatedSettings(default_beam_size=4, max_beam_size=4).default_beam_size == 4


async def test_suggest_and_spec_answer_as_libretranslate_does() -> None:
    """/suggest was a 404 (clients read it as a wrong URL): a 403 as LibreTranslate's with suggestions off; /spec, where
    LibreTranslate describes its API, is the OpenAPI document."""
    async with serve(FakeTranslator()) as (client, _):
        suggest = await client.post("/suggest", data={"q": "Hi", "s": "Hallo", "source": "en", "target": "de"})
        spec = await client.get("/spec")
        settings = (await client.get("/frontend/settings")).json()
    assert suggest.status_code == 403 and suggest.json() == {"error": "suggestions are disabled on this server"}
    assert settings["suggestions"] is False
    assert spec.status_code == 200 and "/translate" in spec.json()["paths"] and "/spec" not in spec.json()["paths"]


async def test_languages_in_libretranslate_shape() -> None:
    fake = FakeTranslator(pairs=[("en", "de"), ("de", "en"), ("fr", "en"), ("en", "fr")])
    async with serve(fake) as (client, _):
        r = await client.get("/languages")
    assert r.json() == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": ["en"]},
    ]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"q": "x" * 5001, **EN_DE}, 413, "request (5001 characters) exceeds the limit of 5000 characters (max_chars)"),
        ({"q": ["x" * 100] * 49 + ["x" * 101], **EN_DE}, 413, "5001 characters"),  # summed over the list
        ({"q": ["a"] * 51, **EN_DE}, 400, "q has 51 texts, over the limit of 50 (max_items)"),
        ({"q": "w " * 300, **EN_DE}, 400, "a sentence has 301 tokens, over the limit of 200 (max_sentence_tokens)"),
        ({"q": "x", **EN_DE, "beam_size": 9}, 400, "max_beam_size"),
        ({"q": "x", **EN_DE, "alternatives": 6}, 400, "max_alternatives"),
        ({"q": "x", "source": "en", "target": "fr"}, 400, "en->fr is not supported"),
        ({"q": "x", "source": "xx", "target": "de"}, 400, "xx->de is not supported"),
        ({"q": "x", "source": "xx", "target": "xx"}, 400, "xx->xx is not supported"),  # one language, not served
        ({"q": "x", "source": "auto", "target": "fr"}, 400, "source=auto: the model does not translate into 'fr'"),
        ({"q": [], **EN_DE}, 400, "empty list"),
    ],
)
async def test_limits_and_bad_fields(body: dict[str, Any], status: int, message: str) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json=body)
    assert (r.status_code, list(r.json())) == (status, ["error"]), r.text
    assert message in r.json()["error"]
    assert len(fake.calls) == 1  # only the canary: nothing over a limit reaches the engine, nothing is truncated


@pytest.mark.parametrize(
    ("content", "ctype", "status", "message"),
    [
        (b'{"q": "x", "source": ', "application/json", 422, "not valid JSON"),
        (b"\xff\xfe\x00garbage", "application/json", 422, "not valid JSON"),
        (b'{"q": 5, "source": "en", "target": "de"}', "application/json", 422, "q"),
        (b'{"q": ["ok", 3], "source": "en", "target": "de"}', "application/json", 422, "q"),
        (b'{"q": {"a": 1}, "source": "en", "target": "de"}', "application/json", 422, "q"),
        (b'{"source": "en", "target": "de"}', "application/json", 422, "invalid request: q is required"),
        (
            b'{"q": "x", "source": "en", "target": "de", "alternatives": "many"}',
            "application/json",
            422,
            "alternatives",
        ),
        (b'{"q": "x", "source": "en", "target": "de", "alternatives": -1}', "application/json", 422, "alternatives"),
        (b'{"q": "x", "source": "en", "target": "de", "format": "pdf"}', "application/json", 422, "format"),
        (b'"just a string"', "application/json", 422, "JSON object"),
        (b"[1, 2]", "application/json", 422, "JSON object"),
        (b'{"q": ' + b"[" * 50000 + b"]" * 50000 + b', "source": "en", "target": "de"}', "application/json", 422, ""),
        (b"alternatives=x&q=a&source=en&target=de", "application/x-www-form-urlencoded", 422, "alternatives"),
        (b"source=en&target=de", "application/x-www-form-urlencoded", 422, "q"),
        (b"--nope\r\ngarbage", "multipart/form-data; boundary=nope", 422, ""),
        (b"q=x&source=en&target=de", "text/plain", 415, "content type"),
        (b"q=x&source=en&target=de", "", 415, "content type"),
    ],
)
async def test_malformed_bodies_are_4xx_json(content: bytes, ctype: str, status: int, message: str) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", content=content, headers={"content-type": ctype} if ctype else {})
    assert r.status_code == status, r.text
    assert list(r.json()) == ["error"] and message in r.json()["error"]
    assert len(fake.calls) == 1  # only the canary


INTERNAL_WORDS = ("sys.", "recursion", "codec", "Expecting", "Input should", "pydantic", "Traceback", "[type=")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"q": "x", "source": "en", "target": "de", "beam_size": ' + b"1" * 5000 + b"}", "more than 18 digits"),
        (
            b'{"q": ' + b"[" * 5000 + b"]" * 5000 + b', "source": "en", "target": "de"}',
            "nests arrays or objects too deeply",
        ),
        (b'{"q": "x", "source": "en", "target": "de", "beam_size": NaN}', "NaN is not a JSON value"),
        (b'{"q": "x", "source": "en", "target": "de", "beam_size": -Infinity}', "-Infinity is not a JSON value"),
        (b'{"q": "\xe4", "source": "en", "target": "de"}', "body is not valid JSON: it is not UTF-8 text"),
        (gzip.compress(b'{"q": "x", "source": "en", "target": "de"}', mtime=0), "not UTF-8 text"),  # no header
        (b'{"q": "x",\n "source": }', "body is not valid JSON: syntax error at line 2, column 12"),
        (b'{"q": "x", "source": "en", "target": "de", "beam_size": 1e400}', "beam_size must be a whole number"),
        (b'{"q": ["a", {"b": 1}], "source": "en", "target": "de"}', "q must be a text or a list of texts: item 1 is"),
        (b'{"q": "x", "source": "", "target": "de"}', 'source must have at least 1 character, not the text ""'),
        (b'{"q": "x", "source": "en", "target": "de", "format": "pdf"}', "format must be 'text' or 'html'"),
    ],
    ids=["huge-int", "deep", "nan", "-inf", "latin-1", "gzip", "syntax", "1e400", "q-item", "empty", "format"],
)
async def test_422_messages_are_in_our_own_words(content: bytes, message: str) -> None:
    async with serve() as (client, _):
        r = await client.post("/translate", content=content, headers={"content-type": "application/json"})
    assert (r.status_code, list(r.json())) == (422, ["error"]), r.text
    error = r.json()["error"]
    assert message in error and not [w for w in INTERNAL_WORDS if w in error], error


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("beam_size", True, "true"),
        ("beam_size", "4", 'the text "4"'),
        ("beam_size", 4.0, "the number 4.0"),
        ("beam_size", 2.5, "the number 2.5"),
        ("alternatives", False, "false"),
        ("alternatives", "1", 'the text "1"'),
        ("alternatives", {"n": 1}, "an object"),
        ("beam_size", [4], "a list"),
    ],
)
async def test_numeric_fields_take_json_integers_only(field: str, value: Any, shown: str) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "x", **EN_DE, field: value})
    assert r.status_code == 422, r.text
    example = 4 if field == "beam_size" else 2
    assert r.json() == {
        "error": f"invalid request: {field} must be a whole number written as a JSON integer, such as {example}, "
        f"not {shown}"
    }
    assert len(fake.calls) == 1


async def test_null_numbers_are_unset_and_huge_ones_name_the_setting() -> None:
    """null is "not given" for both numbers (beam_size: the server's default; alternatives: none); a beam beyond any
    limit is refused by max_beam_size (alternatives by max_alternatives), named, not by a bound of the schema's own."""
    async with serve() as (client, _):
        r = await client.post("/translate", json={"q": "a b", **EN_DE, "beam_size": None, "alternatives": None})
        assert r.status_code == 200 and r.json() == {"translatedText": "B A"}, r.text
        r = await client.post("/translate", json={"q": "a b", **EN_DE, "beam_size": 123456789012345678})
        assert r.status_code == 400 and "max_beam_size" in r.json()["error"], r.text
        r = await client.post("/translate", json={"q": "a b", **EN_DE, "alternatives": 123456789012345678})
        assert r.status_code == 400 and "max_alternatives" in r.json()["error"], r.text


async def test_form_bodies_write_numbers_in_decimal_digits() -> None:
    fake = FakeTranslator()
    form = {"content-type": "application/x-www-form-urlencoded"}
    async with serve(fake) as (client, _):
        r = await client.post(
            "/translate", content=b"q=x&source=en&target=de&beam_size=06&alternatives=1", headers=form
        )
        assert r.status_code == 200 and (fake.options[-1].beam_size, fake.options[-1].num_hypotheses) == (6, 2)
        r = await client.post("/translate", content=b"q=x&source=en&target=de&beam_size=&alternatives=", headers=form)
        assert r.status_code == 200 and (fake.options[-1].beam_size, fake.options[-1].num_hypotheses) == (4, 1)
        for raw, shown in [
            ("true", '"true"'),
            ("4.0", '"4.0"'),
            ("%2B4", '"+4"'),
            ("%204", '" 4"'),
            ("%D9%A4", '"\\u0664"'),
        ]:
            r = await client.post(
                "/translate", content=f"q=x&source=en&target=de&beam_size={raw}".encode(), headers=form
            )
            assert r.status_code == 422, raw
            assert r.json() == {
                "error": "invalid request: beam_size must be a whole number written in decimal digits, such as 4, "
                f"not the text {shown}"
            }
    assert len(fake.calls) == 3  # the canary and the two good requests


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "gzip, identity"])
async def test_compressed_bodies_are_415(encoding: str) -> None:
    fake = FakeTranslator()
    body = gzip.compress(b'{"q": "x", "source": "en", "target": "de"}')
    async with serve(fake) as (client, _):
        r = await client.post(
            "/translate", content=body, headers={"content-type": "application/json", "content-encoding": encoding}
        )
        assert r.status_code == 415 and r.headers["accept-encoding"] == "identity"
        assert r.json()["error"].startswith(f"unsupported content encoding {encoding!r}: send the body uncompressed")
        plain = {"content-type": "application/json", "content-encoding": "identity"}
        r = await client.post("/translate", content=b'{"q": "x", "source": "en", "target": "de"}', headers=plain)
        assert r.json() == {"translatedText": "X"}
    assert fake.translated[1:] == ["x"]


async def test_frontend_settings_state_the_request_limits() -> None:
    limits: dict[str, Any] = {
        "max_chars": 123,
        "max_items": 7,
        "max_queue_items": 99,
        "max_beam_size": 3,
        "default_beam_size": 3,
    }
    async with serve(**limits, max_alternatives=2) as (c, _):
        settings = (await c.get("/frontend/settings")).json()
    assert {k: settings[k] for k in ("char_limit", "max_items", "max_queue_items", "max_beam_size")} == {
        "char_limit": 123,
        "max_items": 7,
        "max_queue_items": 99,
        "max_beam_size": 3,
    }
    assert (settings["max_alternatives"], settings["max_sentence_tokens"]) == (2, 200)
    # LibreTranslate's keys, which its page and its clients read
    assert (settings["charLimit"], settings["keyRequired"], settings["suggestions"]) == (123, False, False)
    assert settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "de", "name": "German"},
    }


async def test_a_body_over_max_body_bytes_is_413_before_it_is_parsed() -> None:
    deep = ("[" * 100_000 + "]" * 100_000).encode()  # would be a 422 if it were parsed

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: the limit is counted while reading
        for start in range(0, len(deep), 4096):
            yield deep[start : start + 4096]

    async with serve(max_body_bytes=10_000) as (client, _):
        r = await client.post("/translate", content=deep, headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        assert r.json() == {"error": "request body (200000 bytes) exceeds the limit of 10000 bytes (max_body_bytes)"}
        r = await client.post("/translate", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        assert r.json() == {"error": "request body exceeds the limit of 10000 bytes (max_body_bytes)"}


async def test_lone_surrogates_are_replaced_not_an_error() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post(
            "/translate",
            content=b'{"q": "\\ud800 x", "source": "en", "target": "de"}',
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 200, r.text
    assert r.json() == {"translatedText": "X ?"}
    assert fake.translated[1:] == ["? x"]  # the engine only ever sees encodable text


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('"api_key": "\\ud800"', "api_key"),
        ('"glossary": [{"source": "a\\ud800", "target": "b"}]', "glossary item 0: source"),
        ('"glossary": [{"source": "a", "target": "\\udc00"}]', "glossary item 0: target"),
        ('"target": "d\\ud800"', "target"),  # (the later "target" of the body is the one read)
    ],
)
async def test_a_lone_surrogate_outside_q_is_a_422_that_says_what_it_is(extra: str, field: str) -> None:
    """Not "must be a text, not the text \\ud800", which contradicts itself."""
    async with serve(FakeTranslator()) as (client, _):
        body = '{"q": "x", "source": "en", "target": "de", ' + extra + "}"
        r = await client.post("/translate", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"].endswith(
        f"{field} holds half a character (a lone surrogate, such as \\ud800): send whole characters"
    )


async def test_a_lone_surrogate_in_a_number_field_is_the_wrong_kind() -> None:
    async with serve(FakeTranslator()) as (client, _):
        body = b'{"q": "x", "source": "en", "target": "de", "beam_size": "\\ud800"}'
        r = await client.post("/translate", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "beam_size must be a whole number" in r.json()["error"], r.text


async def test_engine_errors_are_mapped_and_the_server_keeps_serving(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTranslator()
    fake.fail_on = {
        "long one": InputTooLongError("a sentence has 999 tokens; the model accepts at most 512"),
        "boom": RuntimeError("engine exploded"),
    }
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
    fake = FakeTranslator(max_source_tokens=4)
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "one two three four five", **EN_DE})
        assert r.status_code == 400 and "the model's limit of 4" in r.json()["error"]
        assert (await client.post("/translate", json={"q": "one two", **EN_DE})).status_code == 200
    assert "one two three four five" not in fake.translated  # never queued, so it cannot fail a shared batch


async def test_more_sentences_than_the_queue_holds_is_413_not_500() -> None:
    async with serve(max_queue_items=10) as (client, _):
        r = await client.post("/translate", json={"q": "One. " * 11, **EN_DE})
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
