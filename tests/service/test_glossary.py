"""POST /translate with a glossary through the real app: the terms come out as given in every frame (with the fake,
with translators that lose or mangle placeholders, and with the real tiny model), translation without a term is
unchanged, the cache serves every glossary, bad glossaries are refused in our words, and the server's glossary file.

The fake translator reverses and upper-cases the words of each sentence; a term put back by the glossary is neither,
so it shows where each term went."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.service.harness import EN_DE, FakeTranslator, build_app, serve
from tests.service.test_app_html import assert_same_markup
from tests.service.test_html_placeholders import MangledTranslator
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.engine.translator import Translator
from transduce.service.engine_api import TranslatorLike

pytestmark = pytest.mark.anyio

# (source, target): target None keeps the source term as written
TERMS: list[tuple[str, str | None]] = [
    ("pull request", "Pull-Request"),
    ("Node.js", None),
    ("GitHub", None),
    ("machine translation", "maschinelle Übersetzung"),
    ("API key", "API-Schlüssel"),
    ("Dr. Smith", "Dr. Schmidt"),
    ("e-mail", "E-Mail"),
    ("dashboard", "Übersichtsseite"),
    ("Kubernetes", None),
    ("release notes", "Versionshinweise"),
    ("login", "Anmeldung"),
    ("C++", None),
    ("bug tracker", "Fehlerverfolgung"),
    ("smartphone", "Smartphone"),
    ("translation memory", "Translation-Memory"),
    ("U.S.", "USA"),
    ("open source", "Open Source"),
    ("cache", "Zwischenspeicher"),
    ("Mastodon", None),
    ("user interface", "Benutzeroberfläche"),
]
GLOSSARY = [{"source": s, "target": t} for s, t in TERMS]
FRAMES = [  # (format, text): the term at a sentence's start, at its end, before punctuation, in <b>, beside "[1]"
    ("text", "{} is what we talked about yesterday."),
    ("text", "Yesterday we talked about {}"),
    ("text", "Did you check the {}? We did."),
    ("html", "<p>Please read about <b>{}</b> first.</p>"),
    ("text", "See [1] {} for details."),
]


def is_hit(out: str, source: str, target: str | None) -> bool:
    """The target term is in the output (the source term verbatim, for a term to keep), and the source term is not
    (case-insensitive, whole words) once the target's own occurrences are taken out."""
    wanted = source if target is None else target
    if wanted not in out:
        return False
    rest = out.replace(wanted, " ")
    return target is None or not re.search(rf"(?<!\w){re.escape(source)}(?!\w)", rest, re.IGNORECASE)


async def hit_rate(translator: TranslatorLike, **extra: Any) -> tuple[float, list[str]]:
    """Every term in every frame translated with the glossary: the share of hits, and the outputs that missed."""
    misses, total = [], 0
    async with serve(translator) as (client, _):
        for fmt, frame in FRAMES:
            cases = [(frame.format(s), s, t) for s, t in TERMS]
            body = {"q": [q for q, _, _ in cases], **EN_DE, "format": fmt, "glossary": GLOSSARY, **extra}
            r = await client.post("/translate", json=body)
            assert r.status_code == 200, r.text
            for (q, source, target), out in zip(cases, r.json()["translatedText"], strict=True):
                total += 1
                if fmt == "html":
                    assert_same_markup(q, out)
                if not is_hit(out, source, target):
                    misses.append(f"{q!r} -> {out!r}")
    assert total == len(TERMS) * len(FRAMES) == 100
    return 1 - len(misses) / total, misses


async def test_every_term_comes_out_as_given_in_every_frame_with_the_fake(record_property: Any) -> None:
    fake = FakeTranslator()
    rate, misses = await hit_rate(fake)
    record_property("glossary_hit_rate_fake", rate)
    print(f"glossary hit rate, fake translator: {rate:.0%}")
    assert rate >= 0.95, misses
    sent = fake.translated[1:]
    assert "[1] is what we talked about yesterday." in sent  # the term at the start: one placeholder, never split
    assert "See [1] [2] for details." in sent  # a literal [1] keeps its number; the term gets the next
    assert "Did you check the [1] ? We did." not in sent  # split at the "?" as without a term...
    assert "Did you check the [1] ?" in sent and "We did." in sent
    assert "I met [1] today." not in sent and not any("Dr." in s or "U.S." in s for s in sent)  # never seen


@pytest.mark.parametrize("mode", ["drop", "drop_some", "repeat", "shuffle", "invent", "mix"])
async def test_terms_survive_a_translator_that_loses_or_mangles_placeholders(mode: str, record_property: Any) -> None:
    rate, misses = await hit_rate(MangledTranslator(mode, seed=3))
    record_property(f"glossary_hit_rate_{mode}", rate)
    print(f"glossary hit rate, placeholders {mode}: {rate:.0%}")
    assert rate >= 0.95, misses


async def test_terms_survive_the_tiny_model(tiny_translator: Translator, record_property: Any) -> None:
    rate, misses = await hit_rate(tiny_translator, beam_size=1)
    record_property("glossary_hit_rate_tiny_model", rate)
    print(f"glossary hit rate, tiny model: {rate:.0%}")
    assert rate >= 0.95, misses


async def test_where_terms_go_and_how_they_are_spaced() -> None:
    glossary = [
        {"source": "Node.js", "target": None},
        {"source": "pull request", "target": "Pull-Request"},
        {"source": "pull", "target": "ziehen"},
        {"source": "Dr. Smith", "target": "Dr. Schmidt"},
    ]
    fake = MangledTranslator("keep")  # upper-cases the words, keeps the placeholders where they are
    q = [
        "I use NODE.JS daily, and (node.js) too.\nOpen a pull  request, then pull.",
        "Node.js",  # nothing else to translate: never sent
        "I met Dr. Smith today. He said hi.",
    ]
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "glossary": glossary})
    assert r.json()["translatedText"] == [
        "I USE NODE.JS DAILY, AND (node.js) TOO.\nOPEN A Pull-Request, THEN ziehen.",  # kept as written; longest first
        "Node.js",
        "I MET Dr. Schmidt TODAY. HE SAID HI.",  # a term's "." ends no sentence
    ]
    assert fake.translated[1:] == [
        "I use [1] daily, and ( [2] ) too.",
        "Open a [1] , then [2] .",
        "I met [1] today.",
        "He said hi.",
    ]


async def test_terms_in_html_only_in_translated_text() -> None:
    glossary = [{"source": "Node.js", "target": "NodeJS"}, {"source": "cat", "target": "Katze"}]
    fake = MangledTranslator("keep")
    q = (
        '<p title="A cat">Use <code>Node.js</code>, <span translate="no">cat</span> and <i>Node.js</i> &amp; '
        "<b>the cat</b>.</p><pre>cat</pre>"
    )
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "format": "html", "glossary": glossary})
    out = r.json()["translatedText"]
    assert fake.translated[1:] == ["A cat", "Use [1] , [2] and [3] [4] [5] & [6] the [7] [8] ."]
    assert out == (
        '<p title="A CAT">USE <code>Node.js</code>, <span translate="no">cat</span> AND <i>NodeJS</i> &amp; '
        "<b>THE Katze</b>.</p><pre>cat</pre>"
    )
    assert_same_markup(q, out)


# --- no glossary, no change ----------------------------------------------------------------------------------------

BASELINE = [
    "Hello world. How are you?\n\nFine,  thanks!  ",
    "  Leading space and [1] literal.",
    "",
    "Node.JS and pull-requests are near misses, as is cached.",
]


@pytest.mark.parametrize(
    "glossary",
    [None, [], [{"source": "Hello world!", "target": None}, {"source": "fine thanks", "target": "gut"}, *GLOSSARY]],
)
@pytest.mark.parametrize("fmt", ["text", "html"])
async def test_without_a_term_in_the_text_translation_is_unchanged(glossary: list[Any] | None, fmt: str) -> None:
    q = BASELINE if fmt == "text" else ["<p>Hello <b>world</b>.</p>\n<p>How are you?</p>", *BASELINE]
    q = [t.replace("Node.JS", "Node.JSX") for t in q]  # no term here (a near miss only)
    base, fake = FakeTranslator(), FakeTranslator()
    async with serve(base) as (client, _):
        expected = (await client.post("/translate", json={"q": q, **EN_DE, "format": fmt})).json()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "format": fmt, "glossary": glossary})
    assert r.json() == expected
    assert fake.translated == base.translated


async def test_the_cache_serves_every_glossary_its_own_terms() -> None:
    fake = FakeTranslator()
    keep, swap = [{"source": "Node.js", "target": None}], [{"source": "node.js", "target": "NodeJS"}]
    async with serve(fake, cache_size=100) as (client, _):
        outs = [
            (await client.post("/translate", json={"q": "I use Node.js daily.", **EN_DE, **extra})).json()
            for extra in ({"glossary": keep}, {"glossary": swap}, {})
        ]
        cache = (await client.get("/latency")).json()["cache"]
    assert [o["translatedText"] for o in outs] == [
        "DAILY. Node.js USE I",
        "DAILY. NodeJS USE I",
        "DAILY. NODE.JS USE I",
    ]
    assert fake.translated[1:] == ["I use [1] daily.", "I use Node.js daily."]  # the second glossary hit the cache
    assert cache["hits"] == 1


# --- limits and bad fields -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("glossary", "status", "message"),
    [
        (
            [{"source": f"t{i}", "target": "x"} for i in range(101)],
            400,
            "glossary has 101 terms, over the limit of 100",
        ),
        (
            [{"source": "API key", "target": "a"}, {"source": "api  KEY", "target": "b"}],
            400,
            "glossary has the source terms 'API key' and 'api  KEY', which match the same text",
        ),
        ([{"source": "x", "target": "a"}, {"source": "x", "target": "a"}], 400, "the source term 'x' twice"),
        ([{"source": "", "target": "a"}], 422, "glossary item 0: source must have 1 to 200 characters"),
        ([{"source": " ... ", "target": "a"}], 422, "glossary item 0: source has no letter or digit"),
        ([{"source": "x" * 201, "target": "a"}], 422, "source must have 1 to 200 characters, not a text of 201"),
        ([{"source": "a", "target": "  "}], 422, "target is empty: give the term to use, or null to keep"),
        ([{"source": "a", "target": 3}], 422, "target must be a text (the term to use) or null"),
        ([{"source": "a"}], 422, "glossary item 0: target is required (null keeps the source term as it is)"),
        ([{"source": "a", "target": None, "keep": True}], 422, "glossary item 0 has an unknown field 'keep'"),
        (["a"], 422, 'glossary item 0 must be an object with source and target, not the text "a"'),
        ({"a": "b"}, 422, "glossary must be a list of terms"),
    ],
)
async def test_bad_glossaries_are_refused_in_our_words(glossary: Any, status: int, message: str) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "a x", **EN_DE, "glossary": glossary})
    assert (r.status_code, list(r.json())) == (status, ["error"]), r.text
    assert message in r.json()["error"]
    assert len(fake.calls) == 1  # only the canary


async def test_a_form_body_sends_the_glossary_as_json_text() -> None:
    fake = FakeTranslator()
    async with serve(fake, max_glossary_terms=1) as (client, _):
        form = {"q": "I use Node.js", **EN_DE}
        good = await client.post("/translate", data={**form, "glossary": '[{"source": "node.js", "target": null}]'})
        empty = await client.post("/translate", data={**form, "glossary": ""})
        bad = await client.post("/translate", data={**form, "glossary": '[{"source": "node.js"'})
        over = await client.post("/translate", data={**form, "glossary": json.dumps(GLOSSARY[:2])})
    assert good.json() == {"translatedText": "Node.js USE I"}
    assert empty.json() == {"translatedText": "NODE.JS USE I"}
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("invalid request: glossary is not valid JSON at line 1, column 22; in a form")
    assert over.json() == {"error": "glossary has 2 terms, over the limit of 1 (max_glossary_terms)"}


# --- the server's glossary file ------------------------------------------------------------------------------------


def write(path: Path, data: Any) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


async def test_the_server_glossary_applies_per_pair_and_a_request_overrides_it(tmp_path: Path) -> None:
    path = write(
        tmp_path / "glossary.json",
        {
            "en-de": [{"source": "Node.js", "target": None}, {"source": "pull request", "target": "Pull-Request"}],
            "DE-en": [{"source": "Knoten", "target": "node"}],  # codes in any case, as requests name them
            "en-fr": [{"source": "cat", "target": "chat"}],
        },
    )
    fake = FakeTranslator()
    async with serve(fake, glossary_file=path) as (client, app):
        q = "Use Node.js for a pull request"
        plain = await client.post("/translate", json={"q": q, **EN_DE})
        override = await client.post(
            "/translate", json={"q": q, **EN_DE, "glossary": [{"source": "PULL REQUEST", "target": "PR"}]}
        )
        other = await client.post("/translate", json={"q": "Der Knoten und Node.js", "source": "de", "target": "en"})
        auto = await client.post(
            "/translate",
            json={"q": ["Guten Morgen, wie geht es dir heute? Der Knoten hält.", q], "source": "auto", "target": "en"},
        )
    assert app.state.transduce.settings.glossary[("de", "en")][0].target == "node"
    assert plain.json() == {"translatedText": "Pull-Request A FOR Node.js USE"}
    assert override.json() == {"translatedText": "PR A FOR Node.js USE"}  # the file's other terms still apply
    assert other.json() == {"translatedText": "NODE.JS UND node DER"}  # de-en terms only
    out = auto.json()
    assert out["detectedLanguage"][0]["language"] == "de" and out["detectedLanguage"][1]["language"] == "en"
    assert out["translatedText"] == ["HEUTE? DIR ES GEHT WIE MORGEN, GUTEN HÄLT. node DER", q]  # en passes through


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the glossary file"),
        ("{not json", "is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
        ([], "must be a JSON object such as"),
        ({"ende": []}, "key 'ende' must name a language pair as source-target, such as 'en-de'"),
        ({"en-de": {"a": "b"}}, "'en-de' must be a list of terms"),
        (
            {"en-de": [{"source": "a", "target": "b"}, {"source": "b", "target": "c", "x": 1}]},
            "'en-de' item 1 has an unknown",
        ),
        ({"en-de": [{"source": "A", "target": "b"}, {"source": "a", "target": "c"}]}, "'en-de' has the source terms"),
        ({"en-de": [], "EN-DE": []}, "keys 'EN-DE' and 'en-de' name one language pair: merge them"),
    ],
)
def test_a_bad_glossary_file_stops_the_app_from_being_made(tmp_path: Path, content: Any, message: str) -> None:
    path = str(tmp_path / "missing.json") if content is None else write(tmp_path / "g.json", content)
    with pytest.raises(ValidationError) as caught:
        build_app(FakeTranslator(), glossary_file=path)
    assert [e["loc"] for e in caught.value.errors()] == [("glossary_file",)]
    assert message in caught.value.errors()[0]["msg"] and path in caught.value.errors()[0]["msg"]


def test_a_bad_glossary_file_stops_transduce_serve_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from transduce import serve_cli

    parser = argparse.ArgumentParser()
    serve_cli.add_arguments(parser)
    path = write(tmp_path / "g.json", {"en-de": [{"source": "", "target": "x"}]})
    monkeypatch.setenv("TRANSDUCE_GLOSSARY_FILE", path)
    assert serve_cli.run(parser.parse_args(["--port", "0"])) == 2
    err = capsys.readouterr().err
    assert err == (
        f"transduce serve: invalid setting glossary_file: glossary file {path}: 'en-de' item 0: source must have 1 to "
        '200 characters, not the text ""\n'
    )


async def test_the_published_request_schema_describes_the_glossary_entries() -> None:
    async with serve() as (client, _):
        schema = (await client.get("/openapi.json")).json()
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(schema)))
    assert refs <= set(schema["components"]["schemas"])  # every reference resolves (no $defs left behind)
    items = schema["components"]["schemas"]["TranslateRequest"]["properties"]["glossary"]["anyOf"][0]["items"]
    assert items["required"] == ["source", "target"] and items["additionalProperties"] is False


def test_matching_many_terms_that_share_a_prefix_stays_linear() -> None:
    """100 terms of ~200 characters sharing a prefix, against 5,000 characters that match it: an alternation tries
    every term at every position (0.25 s on the event loop); the trie-shaped pattern walks the prefix once."""
    import time

    from transduce.service.glossary import Matcher

    terms = tuple(("a " * 97 + f"b{i}", "x") for i in range(100))
    text = ("a " * 2500)[:5000]  # every position starts 97 a's deep into every term, and none ends here
    for html in (False, True):
        matcher = Matcher(terms, html=html)
        started = time.perf_counter()
        pieces = matcher.split(text)
        assert time.perf_counter() - started < 0.05
        assert pieces == [text]
    found = Matcher(terms, html=False).split("say " + "a " * 97 + "b7 and " + "a " * 97 + "b7x now")
    assert [p.target for p in found if not isinstance(p, str)] == ["x"]  # b7x is no term, and b7 does not end there


def _as_printf(form: str, match: re.Match[str]) -> str:
    return form.replace("N", match.group(1))


class PrintfTranslator(FakeTranslator):
    """What the shipped model does with placeholders (it learned them from software messages): ``[n]`` comes back as
    a printf-style specifier (``»%1«``, ``%1$s``, ``%s``), sometimes with runs of ``$1`` after a word."""

    def __init__(self, forms: Sequence[str]) -> None:
        super().__init__()
        self.forms = list(forms)

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            form = self.forms.pop(0) if "[" in text else ""
            out.append(re.sub(r"\[(\d+)\]", partial(_as_printf, form), text.upper()))
        return [TranslationResult(hypotheses=[o] * options.num_hypotheses, tokens=[]) for o in out]


async def test_placeholders_given_back_as_printf_specifiers_place_the_term_and_leave_no_trace() -> None:
    glossary = [{"source": "pull request", "target": "Pull-Request"}, {"source": "Node.js", "target": None}]
    q = [
        "Open a pull request now.",
        "See the pull request first.",
        "Read about Node.js today.",
        "A pull request for Node.js here.",
        "Send 5 % of the pull request.",  # a "%" of its own: printf-style text in the output is the model's
    ]
    fake = PrintfTranslator(["»%N«", "%N$s", "%s", "%N$1$1$s", "%N"])
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "glossary": glossary})
    assert r.json()["translatedText"] == [
        "OPEN A Pull-Request NOW.",
        "SEE THE Pull-Request FIRST.",
        "READ ABOUT Node.js TODAY.",  # %s: the sentence's only placeholder
        "A Pull-Request FOR Node.js HERE.",
        "SEND 5 % OF Pull-Request THE %1 .",  # "%1" is not read as a placeholder: the term goes where its source maps
    ]


class Answering(FakeTranslator):
    """Answers each sentence sent with the text ``answers`` gives for it (the fake's own otherwise)."""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__()
        self.answers = answers

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        own = super().translate(texts, source_lang=source_lang, target_lang=target_lang, options=options)
        return [
            TranslationResult([self.answers.get(t, r.hypotheses[0])] * options.num_hypotheses, r.tokens)
            for t, r in zip(texts, own, strict=True)
        ]


async def test_placeholders_and_no_word_back_translate_the_sentence_again_without_them() -> None:
    """The shipped model answers "Good [1] morning" with "[1]": the sentence is translated once more without its
    placeholders, and its markup (or its kept term) placed as for lost ones, instead of keeping it untranslated."""
    fake = Answering({"Good [1] morning": "[1]", "Use [1] now.": "=1]"})
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": "<i>Good</i> morning", **EN_DE, "format": "html"})
        assert r.status_code == 200, r.text
        out = r.json()["translatedText"]
        glossary = [{"source": "Node.js", "target": None}]
        r = await client.post("/translate", json={"q": "Use Node.js now.", **EN_DE, "glossary": glossary})
        assert r.status_code == 200, r.text
        kept = r.json()["translatedText"]
    assert fake.translated[1:] == ["Good [1] morning", "Good morning", "Use [1] now.", "Use now."]
    assert out.count("<i>") == out.count("</i>") == 1 and re.sub("</?i>", "", out) == "MORNING GOOD", out
    assert kept.count("Node.js") == 1 and re.sub(" ?Node.js", "", kept) == "NOW. USE", kept


@pytest.mark.parametrize("fmt", ["text", "html"])
async def test_a_lost_term_is_never_put_inside_another_terms_target(fmt: str) -> None:
    """The model gave one placeholder twice and lost the other: the lost term goes beside the kept one, whose
    target ("C plus plus") stays whole (it went after the first "plus" of it)."""
    glossary = [{"source": "C++", "target": "C plus plus"}, {"source": "Node.js", "target": "Node dot js"}]
    fake = Answering({"[1] or [2] ?": "[1] oder [1] ?", "Use [1] and [2]": "Nutze [1] und [1]"})
    q = "C++ or Node.js?" if fmt == "text" else "<p>Use C++ and Node.js</p>"
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "format": fmt, "glossary": glossary})
    out = r.json()["translatedText"]
    assert fake.translated[1:] == ["[1] or [2] ?" if fmt == "text" else "Use [1] and [2]"], fake.translated
    assert "C plus plus" in out and "Node dot js" in out, out


def test_a_term_is_a_whole_word_but_an_emoji_or_a_control_character_may_touch_one() -> None:
    from transduce.service.glossary import Matcher
    from transduce.service.htmlnodes import Term

    terms = (
        ("cat", "Katze"),
        ("👋", None),
        ("C++", None),
        ("Node.js", None),
        ("U.S.", "USA"),
        (".NET", None),
        ("\x00", None),
    )
    m = Matcher(terms, html=False)
    split = {text: [p.source if isinstance(p, Term) else p for p in m.split(text)] for text in CASES}
    assert split == CASES


CASES = {
    "concat cat": ["concat ", "cat"],  # "cat" inside "concat" is not the term
    "Hi👋 there👋": ["Hi", "👋", " there", "👋"],  # an emoji glued to a word is
    "Hi\x00 \x00there": ["Hi", "\x00", " ", "\x00", "there"],  # so is a NUL (unknown to the model: kept as written)
    "C++11, C++": ["C++11, ", "C++"],  # a term is a whole word, even where its edge is ASCII punctuation
    "AC++ Node.jsx Node.js.": ["AC++ Node.jsx ", "Node.js", "."],
    "Made in the U.S.A. with ASP.NET": ["Made in the U.S.A. with ASP.NET"],
}


@pytest.mark.parametrize(
    ("q", "answer", "expected"),
    [
        (  # the shipped model's answer, placeholders half turned into "=": the junk goes, every tag stays once
            'Run <code>pip install</code> and see <a href="x">the docs</a>.',
            "[1] und =1] sehen die =15].",
            '<code>pip install</code> und sehen <a href="x">die</a>.',  # the space after the code kept
        ),
        ("A <b>b</b> c", "X [1] y [2]] z", "X <b>y</b> z"),  # a bracket touching a placeholder
        ("A <b>b</b> c", "X [1] y [2] [ z", "X <b>y</b> z"),  # one standing apart (the shipped model's "Привет [")
        ("A <b>b</b> c", "X [1] y 2] z [!]", "X <b>y</b> z!"),  # a placeholder without its "[", bracketed "!"
        ("A <b>b</b> c", "X [1] y 112] z", "X <b>y</b> 112 z"),  # a number that is no placeholder keeps its digits
        ("Read <b>chapter 2</b> now", "Lies [1] Kapitel 2] jetzt", "Lies <b>Kapitel</b> 2 jetzt"),  # nor one it has
        ("Dial <b>" + "7" * 4400 + "</b> now", "Wähle [1] x [2] jetzt", "Wähle <b>x</b> jetzt"),  # (int() refused it)
        ("A <b>b</b> c", "X =1 y [2] z", "X <b>y</b> z"),  # "=1" with no bracket at all (emoji sentences)
        ("A <b>b</b> c", "X [1] y [2] = 5 [c]", "X <b>y</b> = 5 [c]"),  # "=", brackets of the translation's own
        ("A b c.", "X = 5 [c].", "X = 5 [c]."),  # no placeholders: nothing is read as one
        ("Set <b>x</b> = 1 [a]", "Setze [1] x [2] = 1 [a]", "Setze <b>x</b> = 1 [a]"),  # the sentence's own "=", "["
    ],
)
async def test_placeholder_junk_is_dropped_unless_the_sentence_has_those_characters(
    q: str, answer: str, expected: str
) -> None:
    sent = {"Run [1] and see [2] the docs [3] .": 0, "A [1] b [2] c": 0, "Set [1] x [2] = 1 [a]": 0, "A b c.": 0}
    sent["Read [1] chapter 2 [2] now"] = sent["Dial [1] " + "7" * 4400 + " [2] now"] = 0
    fake = Answering(dict.fromkeys(sent, answer))
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "format": "html"})
    assert fake.translated[1:] and fake.translated[1] in sent, fake.translated
    assert r.json()["translatedText"] == expected


def matchers_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of terms of every glossary matcher compiled from now on (the list grows as they are)."""
    from transduce.service import glossary

    built: list[int] = []
    real_init = glossary.Matcher.__init__

    def counting_init(self: glossary.Matcher, terms: Any, *, html: bool, glued: bool = False) -> None:
        built.append(len(terms))
        real_init(self, terms, html=html, glued=glued)

    monkeypatch.setattr(glossary.Matcher, "__init__", counting_init)
    return built


class SpellsNoHan(FakeTranslator):
    """The fake, unable to spell Han characters (as the shipped model cannot): the service keeps them as written."""

    def unknown_runs(self, text: str) -> list[str]:
        return re.findall(r"[\u4e00-\u9fff]+", text)


async def test_a_glossary_compiles_once_however_many_items_bring_their_own_unknown_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each item's runs the model cannot spell were appended to the glossary's terms, so every item compiled the
    whole glossary again, on the event loop (a file of 5,000 terms and 50 items: 16 s; 100 terms of 200
    characters: 2.8 s). Now the glossary compiles
    once and each item's runs on their own; a term and a run that are the same text give the term's target."""
    built = matchers_built(monkeypatch)
    terms = [{"source": f"once{i} " + "w" * 100, "target": f"T{i}"} for i in range(99)]
    terms.append({"source": "丁丁", "target": "DING"})
    q = [f"see {chr(0x4E00 + 40 + i)} and once7 {'w' * 100}" for i in range(30)] + ["a 丁丁 b"]
    async with serve(SpellsNoHan()) as (client, _):
        for fmt in ("text", "html"):
            r = await client.post("/translate", json={"q": q, **EN_DE, "glossary": terms, "format": fmt})
            assert r.status_code == 200, r.text
            out = r.json()["translatedText"]
            assert out[:30] == [f"T7 AND {chr(0x4E00 + 40 + i)} SEE" for i in range(30)]
            assert out[30] == "B DING A"
    assert built.count(len(terms)) == 2  # the glossary: once as text, once as HTML (where a term may wrap lines)
    assert len(built) == 2 + 2 * 31  # and each item's own runs, as text and as HTML


async def test_the_server_glossary_compiles_once_whatever_glossaries_requests_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's glossary was merged into the file's, so each distinct request glossary compiled the whole file
    again on the event loop, and the cache kept a copy of it for each (a 2,000-term file: 2.2 MB per request
    glossary). The file's terms for a pair now compile once; a request's term still wins for the same text."""
    built = matchers_built(monkeypatch)
    entries = [{"source": f"filed{i}", "target": f"F{i}"} for i in range(999)] + [{"source": "term", "target": "T"}]
    path = write(tmp_path / "glossary.json", {"en-de": entries})
    async with serve(FakeTranslator(), glossary_file=path) as (client, _):
        for i in range(70):  # more request glossaries than the cache keeps, in a pair the file has no terms for
            body = {"q": "eigen", "source": "de", "target": "en", "glossary": [{"source": "eigen", "target": f"O{i}"}]}
            assert (await client.post("/translate", json=body)).json() == {"translatedText": f"O{i}"}
        for i in range(3):  # the file's matcher was not pushed out
            body = {"q": "term and filed3 and own", **EN_DE, "glossary": [{"source": "own", "target": f"O{i}"}]}
            r = await client.post("/translate", json=body)
            assert r.json() == {"translatedText": f"O{i} AND F3 AND T"}
        for source, q in (("TERM", "term and own"), ("filed3", "FILED3 and own"), ("fïled7", "filed7 and own")):
            body = {"q": q, **EN_DE, "glossary": [{"source": source, "target": "mine"}]}
            r = await client.post("/translate", json=body)  # a request's entry replaces the file's for the term
            assert r.json() == {"translatedText": "OWN AND mine" if source != "fïled7" else "OWN AND F7"}, source
    assert built.count(1000) == 1  # the file's, once; each request's glossary of one term, on its own
    assert built.count(1) == 76


@pytest.mark.parametrize(
    ("text", "runs", "translation", "expected"),
    [
        ("Hi👋 there.", ["👋"], "Hallo [1] dort.", "Hallo👋 dort."),  # glued to its word, as in the source
        ("Hello\x00world.", ["\x00"], "Hallo [1] Welt.", "Hallo\x00Welt."),
        ("Say Привет now.", ["Привет"], "Sag [1] jetzt.", "Sag Привет jetzt."),  # spaced in the source: spaced
        ("Hi👋 there.", ["👋"], "Hallo dort.", "Hallo👋 dort."),  # lost: after the nearest word, glued as it was
        ("Call Иван, please.", ["Иван"], "Rufen Sie [1] bitte an.", "Rufen Sie Иван bitte an."),  # touched a comma
        ("Das ist (Иван) hier.", ["Иван"], "Das ist [1] hier.", "Das ist Иван hier."),  # only a word is glued to
        ("नमस्ते👋 दोस्त.", ["👋"], "Hallo [1] Freund.", "Hallo👋 Freund."),  # a word ending in a vowel sign is one
        ("Nice ❤️👋 there.", ["👋"], "Schön [1] dort.", "Schön 👋 dort."),  # an emoji's variation selector is not
        ("Press 1️⃣👋 now.", ["👋"], "Drück [1] jetzt.", "Drück 👋 jetzt."),  # nor a keycap ("1" and two marks)
        ("Call Иван now.", ["Иван"], "फ़ोन करें [1] अभी।", "फ़ोन करें Иван अभी।"),  # nor glued to one in the translation
    ],
)
def test_a_run_kept_as_written_is_spaced_as_in_the_source(
    text: str, runs: list[str], translation: str, expected: str
) -> None:
    """Runs the model cannot spell were spaced as words are: "Hi👋 there." came back "Hi 👋 there.", though README
    says "even glued to a word"."""
    from transduce.service.glossary import mask_text
    from transduce.service.validation import kept_as_written

    masked = mask_text(text, runs=kept_as_written(runs))
    assert masked.rejoin([translation]) == expected
