"""The app over the tiny exported model (the real engine): what the fake translator cannot show.

Request shapes, limits, errors and operations are tested over the fake (test_app_translate.py, test_app_ops.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from asgi_lifespan import LifespanManager

from tests.service.harness import EN_DE, build_app, post_then_hang_up, serve, wait_until
from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.engine.session import usable_cores
from transduce.engine.translator import Translator
from transduce.service.cache import CacheKey, TranslationCache
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorLike
from transduce.service.main import load_translator

pytestmark = pytest.mark.anyio
SENTENCES = ["Hello world.", "The cat sees the dog.", "A big red house.", "Good night, old world!"]


def alone(translator: Translator, text: str, *, beam: int = 4, n: int = 1, source: str = "en") -> list[str]:
    """The engine's own hypotheses for ``text`` translated by itself (into the other language of en/de)."""
    target = "de" if source == "en" else "en"
    options = DecodeOptions(beam_size=beam, num_hypotheses=n, no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE)
    return translator.translate([text], source_lang=source, target_lang=target, options=options)[0].hypotheses


async def test_the_app_returns_what_the_engine_returns(tiny_translator: Translator) -> None:
    async with serve(tiny_translator) as (client, _):
        r = await client.post("/translate", json={"q": "Hello world.", **EN_DE})
        assert r.status_code == 200, r.text
        assert r.json() == {"translatedText": alone(tiny_translator, "Hello world.")[0]}
        r = await client.post("/translate", json={"q": SENTENCES, **EN_DE, "format": "text"})
        assert r.json() == {"translatedText": [alone(tiny_translator, s)[0] for s in SENTENCES]}
        r = await client.post("/translate", json={"q": "Tag", "source": "de", "target": "en", "beam_size": 1})
        assert r.json() == {"translatedText": alone(tiny_translator, "Tag", beam=1, source="de")[0]}
        r = await client.post("/translate", json={"q": "Hello world.", **EN_DE, "alternatives": 2})
        expected = alone(tiny_translator, "Hello world.", n=3)
        assert r.json() == {"translatedText": expected[0], "alternatives": expected[1:]}
        ready = (await client.get("/health/ready")).json()
        languages = (await client.get("/languages")).json()
        metrics = (await client.get("/metrics")).text
    assert ready["model"] == "tiny-random"  # the model's own name, from its manifest
    assert languages == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": ["de"]},
    ]
    padding = re.search(r"^transduce_padding_ratio ([0-9.e+-]+)$", metrics, re.MULTILINE)
    assert padding and 0 < float(padding.group(1)) < 1  # the engine's padded batches, measured


@pytest.mark.parametrize(
    "text",
    [
        "Hello\x00world\x07 \x1b[31mred\x1b[0m",  # control characters
        "zero\u200bwidth\u200djoiner\ufeff",  # zero-width characters and a BOM
        "Hello Мир 世界 مرحبا",  # mixed scripts
        "I love it 😀👍🏽 🇩🇪",  # emoji, skin tone, flag
        "שלום עולם! مرحبا بالعالم",  # right-to-left text
        "<p>Hello <b>world</b></p><script>alert(1)</script>",  # HTML sent as format=text
        "a" * 1000,  # a 1,000-character single "word"
        "\u0301\u0301\u0301",  # lone combining marks
        "   leading and trailing   ",
    ],
)
async def test_weird_but_valid_text_translates_or_passes(tiny_translator: Translator, text: str) -> None:
    async with serve(tiny_translator) as (client, _):
        r = await client.post("/translate", json={"q": text, **EN_DE, "format": "text"})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert isinstance(r.json()["translatedText"], str)
    else:
        assert "max_sentence_tokens" in r.json()["error"]  # the one limit such text may hit: named, not truncated


async def test_10000_character_word(tiny_translator: Translator) -> None:
    async with serve(tiny_translator, max_chars=20_000) as (client, _):
        unknown = await client.post("/translate", json={"q": "x" * 10_000, **EN_DE})
        known = await client.post("/translate", json={"q": "hello" * 2_000, **EN_DE})
    assert unknown.status_code == 200  # one unknown piece: translated (bounded by source length + 50)
    assert known.status_code == 400 and "max_sentence_tokens" in known.json()["error"]  # thousands of pieces
    async with serve(tiny_translator) as (client, _):
        r = await client.post("/translate", json={"q": "x" * 10_000, **EN_DE})
    assert r.status_code == 413 and "max_chars" in r.json()["error"]


async def test_the_step_scheduler_serves_joins_and_drops_a_client_that_left(tiny_translator: Translator) -> None:
    """The production scheduler through the app: concurrent requests of both directions and beams equal the engine's
    own output, and a client that hangs up mid-decode has its sentences dropped from the running batch."""
    long_text = " ".join(SENTENCES * 4)
    async with serve(tiny_translator, max_batch_size=4) as (client, app):
        pipeline = app.state.transduce.pipeline
        assert pipeline.status()["scheduler"] == "step"
        call, hung_up = post_then_hang_up(app, {"q": long_text, **EN_DE, "beam_size": 3})
        await wait_until(lambda: pipeline.queue.in_flight > 0)
        answers = await asyncio.gather(
            client.post("/translate", json={"q": SENTENCES[0], **EN_DE, "beam_size": 1}),
            client.post("/translate", json={"q": "Guten Tag.", "source": "de", "target": "en"}),
        )
        hung_up.set()
        await asyncio.wait_for(call, 10)
        await wait_until(lambda: pipeline.queue.in_flight == 0 and pipeline.queue.queue_depth == 0)
    assert answers[0].json() == {"translatedText": alone(tiny_translator, SENTENCES[0], beam=1)[0]}
    assert answers[1].json() == {"translatedText": alone(tiny_translator, "Guten Tag.", source="de")[0]}


@pytest.mark.parametrize("scheduler", ["step", "static"])
async def test_the_runaway_guard_is_a_setting(
    tiny_translator: Translator, scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny random model rarely says eos: its outputs run to the length cap, which the settings set."""
    text = "Hello world. The cat sees the dog."
    sentences = ["Hello world.", "The cat sees the dog."]
    put = TranslationCache.put
    engine: dict[str, TranslationResult] = {}  # sentence -> the engine's result, as it reaches the cache

    def keeping(self: TranslationCache, key: CacheKey, result: TranslationResult) -> None:
        engine[key[-1]] = result
        put(self, key, result)

    monkeypatch.setattr(TranslationCache, "put", keeping)
    for ratio, extra in ((2.0, 10), (0.5, 2)):
        async with serve(tiny_translator, scheduler=scheduler, max_length_ratio=ratio, extra_decoding_length=extra) as (
            client,
            _,
        ):
            r = await client.post("/translate", json={"q": text, **EN_DE, "beam_size": 1})
        assert r.status_code == 200
        by_text = dict(engine)
        for sentence in sentences:
            cap = DecodeOptions(max_length_ratio=ratio, extra_decoding_length=extra).max_lengths(
                [tiny_translator.count_tokens(sentence)], 10**6
            )[0]
            produced = len(by_text[sentence].tokens[0])  # generated pieces, eos not included
            assert produced <= cap, (sentence, produced, cap)
    assert produced == cap  # the random model ran to the tight cap: the setting, not the model, stopped it


@pytest.mark.parametrize("scheduler", ["step", "static"])
async def test_the_repeat_guard_is_a_setting(tiny_translator: Translator, scheduler: str) -> None:
    """The tiny random model loops ("licht licht licht ..."): the server decodes with the setting's n-gram guard."""
    answers = {}
    for size in (0, 2, SERVED_NO_REPEAT_NGRAM_SIZE):
        async with serve(tiny_translator, scheduler=scheduler, no_repeat_ngram_size=size) as (client, _):
            r = await client.post("/translate", json={"q": "Hello world.", **EN_DE, "beam_size": 2})
        assert r.status_code == 200, r.text
        options = DecodeOptions(beam_size=2, no_repeat_ngram_size=size)
        engine = tiny_translator.translate(["Hello world."], source_lang="en", target_lang="de", options=options)
        assert r.json()["translatedText"] == engine[0].hypotheses[0]
        answers[size] = r.json()["translatedText"]
    assert len(set(answers.values())) == 3  # each setting decodes differently on this model
    with pytest.raises(ValueError, match="at least 2"):
        Settings(no_repeat_ngram_size=1)


@pytest.mark.parametrize("scheduler", ["static", "step"])
def test_engine_replicas_default_to_two_on_two_cores_with_either_scheduler(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, scheduler: str
) -> None:
    monkeypatch.setattr("transduce.engine.session.usable_cores", lambda: 2)
    settings = Settings(model_dir=str(tiny_model_dir), device="cpu", scheduler=scheduler)
    assert settings.engine_replicas == 0  # auto
    engine = load_translator(settings)
    assert isinstance(engine, Translator) and len(engine.runners) == 2
    with pytest.raises(ValueError, match="must be >= 0"):
        Settings(engine_replicas=-1)


@pytest.mark.parametrize("scheduler", ["static", "step"])
async def test_engine_replicas_serve_concurrent_requests_like_one(
    tiny_translator: Translator, tiny_model_dir: Path, scheduler: str
) -> None:
    loaded: list[TranslatorLike] = []

    def factory(settings: Settings) -> TranslatorLike:
        loaded.append(load_translator(settings))
        return loaded[-1]

    app = build_app(
        factory=factory,
        model_dir=str(tiny_model_dir),
        device="cpu",
        engine_replicas=2,
        max_wait_ms=0,
        scheduler=scheduler,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        LifespanManager(app, startup_timeout=30),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        queries = SENTENCES * 3
        replies = await asyncio.gather(
            *(client.post("/translate", json={"q": q, **EN_DE, "beam_size": 1}) for q in queries)
        )
    engine = loaded[0]
    assert isinstance(engine, Translator) and len(engine.runners) == 2
    threads = max(1, usable_cores() // 2)  # the cores shared out between the replicas
    assert all(r.sessions.options.intra_op_num_threads == threads for r in engine.runners)
    for query, reply in zip(queries, replies, strict=True):
        assert reply.status_code == 200, reply.text
        assert reply.json() == {"translatedText": alone(tiny_translator, query, beam=1)[0]}


async def test_static_batching_answers_a_request_when_its_own_sentence_is_done(tiny_translator: Translator) -> None:
    from transduce.engine.batcher import BatcherConfig, BatchStats
    from transduce.service.pipeline import StaticBatching

    batches: list[BatchStats] = []
    queue = StaticBatching(tiny_translator, BatcherConfig(max_batch_size=2, max_wait_ms=10_000), batches.append)
    options = DecodeOptions(beam_size=1, no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE)  # as alone() decodes
    texts = ["Tag", "The small blue dog runs to the green house and sees the water."]
    await queue.start()
    try:
        answers = await asyncio.gather(
            *(queue.submit([t], source_lang="en", target_lang="de", options=options) for t in texts)
        )
    finally:
        await queue.stop()
    assert [b.size for b in batches] == [2]  # one batch held both
    short, long = (timed for (timed,) in answers)
    assert len(short.result.tokens[0]) < len(long.result.tokens[0])  # greedy: fewer tokens, fewer steps
    assert short.started == long.started and short.finished < long.finished  # handed over before the batch ended
    for timed, text in zip((short, long), texts, strict=True):
        assert timed.result.hypotheses == alone(tiny_translator, text, beam=1)


@pytest.mark.parametrize("fmt", ["text", "html"])
async def test_what_the_vocabulary_cannot_spell_is_kept_as_written(tiny_translator: Translator, fmt: str) -> None:
    """Emoji, other scripts and NUL (each read as one unknown piece, which the model can only write as " ⁇ ") go
    through as glossary terms to keep: as written, once each, even glued to a word."""
    kept = ["👋", "🏳️\u200d🌈", "Привет", "\x00", "\u2066", "\u2069", "\u200f"]
    q = ["Hello 👋 world.", "The 🏳️\u200d🌈 flag.", "Привет world!", "Good night👋", "Good\x00 night.", "\x00Hello."]
    q += ["Hi 😀\u2066", "Say Привет\u2069 now.", "a 😀\u200f"]  # an invisible mark after a run: once, not twice
    assert all(tiny_translator.unknown_runs(text) for text in q)  # the tiny model spells none of them
    if fmt == "html":  # (an HTML parser drops NUL, as browsers do)
        q = [f"<p>{text}</p>" for text in q if "\x00" not in text]
    async with serve(tiny_translator) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "format": fmt, "beam_size": 1})
    assert r.status_code == 200, r.text
    for text, out in zip(q, r.json()["translatedText"], strict=True):
        assert "⁇" not in out, (text, out)
        for run in kept:
            assert out.count(run) == text.count(run), (text, out)


async def test_words_with_letters_the_model_cannot_spell_and_long_runs_are_kept_whole(
    default_translator: Translator,
) -> None:
    """The shipped model spells some letters of "Иван" or "Dvořák" but not others: the whole word is kept (widened
    once per word, up to "_" as the glossary's whole-word match reads it), not its spelled letters with " ⁇ " for the
    rest; a run longer than a glossary term may be (200 characters) is kept too."""
    assert default_translator.unknown_runs("my_Иван_file and Ærøskøbing") == ["my_Иван_file", "Ærøskøbing"]
    assert default_translator.unknown_runs("The a\u0330b word.") == ["a\u0330b"]  # a mark kept with its letters
    long_word = "aø" * 10_000  # one word of 20,000 unknown pieces: each widened once, not once per piece
    assert default_translator.unknown_runs(long_word) == [long_word]
    names = ["Иван", "Москва", "Ærøskøbing", "Łódź", "Dvořák"]
    q = ["My friend Иван lives in Москва.", "The city of Ærøskøbing is nice.", "We visited Łódź and Dvořák."]
    q.append("Hello " + "😀" * 300 + " world.")
    async with serve(default_translator) as (client, _):
        r = await client.post("/translate", json={"q": q, **EN_DE, "beam_size": 1})
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    assert all("⁇" not in text for text in out), out
    for name in names:
        assert sum(text.count(name) for text in out) == 1, (name, out)
    assert out[3].count("😀") == 300


async def test_a_file_sentence_is_cut_to_fit_with_the_placeholders_of_what_the_model_cannot_spell(
    default_translator: Translator,
) -> None:
    """A file's long sentence is cut into parts that fit max_sentence_tokens as validation counts them: each kept run
    goes as a placeholder of several pieces, not as the one unknown piece the raw text has (once a 400). The shipped
    model: the tiny one cannot spell "[1]" either, so its placeholder costs one piece too."""
    assert default_translator.count_tokens("[1]") > default_translator.count_tokens("👋")
    text = " ".join(["the dog 👋"] * 40) + "."
    async with serve(default_translator, max_sentence_tokens=30) as (client, _):
        r = await client.post("/translate_file", files={"file": ("a.txt", text.encode())}, data=EN_DE)
        assert r.status_code == 200, r.text
        got = await client.get(r.json()["translatedFileUrl"])
    assert got.status_code == 200 and got.text.count("👋") == 40


async def test_the_sentence_limit_counts_a_kept_run_as_the_one_piece_it_was(default_translator: Translator) -> None:
    """max_sentence_tokens is checked on the text as written: a run the model cannot spell counts as its one unknown
    piece, not as the several pieces of the placeholder it travels as (an emoji-heavy sentence was refused)."""
    emoji = "😀😃😄😁😆😅😂🤣😊😇🙂🙃😉😌😍🥰😘😗😙😚"
    text = "I like " + " ".join(f"{e} cats" for e in emoji) + "."
    written = default_translator.count_tokens(text)
    async with serve(default_translator, max_sentence_tokens=written) as (client, _):
        r = await client.post("/translate", json={"q": text, **EN_DE, "beam_size": 1})
        assert r.status_code == 200, r.text
        assert all(e in r.json()["translatedText"] for e in emoji)
    async with serve(default_translator, max_sentence_tokens=written - 10) as (client, _):  # (spaces may differ)
        r = await client.post("/translate", json={"q": text, **EN_DE, "beam_size": 1})
        assert r.status_code == 400 and "(max_sentence_tokens)" in r.json()["error"], r.text
