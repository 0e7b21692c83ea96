"""Several models in one server (TRANSDUCE_MODELS), through the real app: the registry, routing, pivoting through
English, detection over every language, a failed model kept apart, and the per-model metrics.

The models: the tiny en<->de and en<->fr models (tests/tiny.py) and a tiny random Hugging Face Marian model
imported as en->es (tests/interop/test_marian.py), so de->fr, de->es, fr->de and fr->es go through English."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from tests.service.harness import DelegatingTranslator, IsolatedSettings, metric, serve_models
from transduce.engine.errors import ModelLoadError
from transduce.engine.options import DEFAULT_OPTIONS, SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.engine.text import split_long
from transduce.engine.translator import Translator
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorLike
from transduce.service.main import load_model_dir
from transduce.service.registry import ModelSpec, RouteTable, model_paths, read_spec, scan

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
SERVED = "served: de->en, en->de, en->es, en->fr, fr->en; through English: de->es, de->fr, fr->de, fr->es"


@pytest.fixture(scope="module")
def engines(tiny_model_dir: Path, tiny_fr_model_dir: Path, marian_es_model_dir: Path) -> dict[str, Translator]:
    """Each model's engine on its own: what the server's answers are compared with."""
    dirs = {"de": tiny_model_dir, "fr": tiny_fr_model_dir, "es": marian_es_model_dir}
    return {name: Translator(path, device="cpu", intra_threads=1) for name, path in dirs.items()}


def alone(engine: Translator, text: str, source: str, target: str, *, beam: int = 4, n: int = 1) -> list[str]:
    """The engine's own n-best for ``text``, decoded as the service decodes."""
    options = DecodeOptions(beam_size=beam, num_hypotheses=n, no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE)
    return engine.translate([text], source_lang=source, target_lang=target, options=options)[0].hypotheses


def through_english(
    first: Translator, second: Translator, text: str, source: str, target: str, n: int = 1
) -> list[str]:
    """Two stages: the first engine's best English, then the second engine's n-best of it (English longer than the
    second model takes is cut into parts that fit, translated one by one and joined)."""
    english = alone(first, text, source, "en")[0].strip()
    parts = [p.strip() for p in split_long(english, lambda t: second.count_tokens(t) <= second.max_source_tokens)]
    ranked = [alone(second, part, "en", target, n=n) for part in parts]
    return [" ".join(r[min(k, len(r) - 1)] for r in ranked) for k in range(n)]


def health_states(ready: httpx.Response) -> dict[str, str]:
    return {m["name"]: m["state"] for m in ready.json()["models"]}


# --- the registry --------------------------------------------------------------------------------------------------


def test_models_name_a_directory_of_models_or_a_list(models_dir: Path, tmp_path: Path) -> None:
    (models_dir / ".staging").mkdir()  # hidden: where a replacement is prepared, never served
    assert [p.name for p in model_paths(str(models_dir))] == ["de", "es", "fr"]
    assert model_paths(f"{models_dir / 'fr'}, {models_dir / 'de'}") == [models_dir / "fr", models_dir / "de"]
    assert model_paths(str(models_dir / "fr")) == [models_dir / "fr"]  # a model directory itself: a list of one
    with pytest.raises(ModelLoadError, match="is not a directory"):
        model_paths(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="model_dir and models are both set"):
        IsolatedSettings(model_dir=str(models_dir / "de"), models=str(models_dir))


def test_a_scan_reads_pairs_from_manifests_and_fingerprints_the_files(models_dir: Path) -> None:
    specs = {s.name: s for s in scan(str(models_dir))}
    assert specs["es"].pairs == (("en", "es"),) and specs["es"].error is None
    assert set(specs["fr"].pairs) == {("en", "fr"), ("fr", "en")}
    before = specs["fr"].fingerprint
    manifest = models_dir / "fr" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "model_name": "v2"}))
    assert read_spec(models_dir / "fr").fingerprint != before  # replaced: a reload swaps it
    assert read_spec(models_dir / "de").fingerprint == specs["de"].fingerprint  # untouched: unchanged
    (models_dir / "junk").mkdir()
    assert "manifest.json is missing" in str(read_spec(models_dir / "junk").error)


def test_routes_are_direct_first_then_through_english() -> None:
    table = RouteTable({"b": [("de", "en"), ("en", "de")], "a": [("en", "de")], "c": [("en", "fr")]})
    assert table.route("en", "de") is not None and table.route("en", "de").models == ["a"]  # type: ignore[union-attr]
    assert table.route("en", "de", lambda name: 0 if name == "b" else 1).models == ["b"]  # type: ignore[union-attr]
    pivot = table.route("de", "fr")
    assert pivot is not None and pivot.pivot == "en" and pivot.models == ["b", "c"]
    assert table.route("fr", "de") is None and table.pivots == {("de", "fr")}


# --- routing through the app ---------------------------------------------------------------------------------------


async def test_languages_are_the_union_with_the_targets_reached_through_english(models_dir: Path) -> None:
    async with serve_models(models_dir) as (client, _):
        languages = (await client.get("/languages")).json()
        ready = await client.get("/health/ready")
    assert languages == [
        {"code": "de", "name": "German", "targets": ["en", "es", "fr"], "pivot_targets": ["es", "fr"]},
        {"code": "en", "name": "English", "targets": ["de", "es", "fr"], "pivot_targets": []},
        {"code": "es", "name": "Spanish", "targets": [], "pivot_targets": []},  # written, not read: listed all the same
        {"code": "fr", "name": "French", "targets": ["de", "en", "es"], "pivot_targets": ["de", "es"]},
    ]
    assert ready.status_code == 200
    assert health_states(ready) == {"de": "ready", "es": "unloaded", "fr": "unloaded"}  # the first one loads at start


async def test_a_request_goes_to_the_model_that_translates_its_pair(
    models_dir: Path, engines: dict[str, Translator]
) -> None:
    text = "The cat sees the dog."
    async with serve_models(models_dir) as (client, _):
        answers = {
            target: await client.post("/translate", json={"q": text, "source": "en", "target": target})
            for target in ("de", "fr", "es")
        }
        back = await client.post("/translate", json={"q": "Le chat.", "source": "fr", "target": "en", "beam_size": 1})
        ready = await client.get("/health/ready")
    for target, model in (("de", "de"), ("fr", "fr"), ("es", "es")):
        assert answers[target].json() == {"translatedText": alone(engines[model], text, "en", target)[0]}
    assert back.json() == {"translatedText": alone(engines["fr"], "Le chat.", "fr", "en", beam=1)[0]}
    models = {m["name"]: m for m in ready.json()["models"]}
    assert {m["state"] for m in models.values()} == {"ready"}
    assert models["es"]["pairs"] == ["en-es"] and models["es"]["memory_mb"] > 0 and models["es"]["load_ms"] > 0


@pytest.mark.parametrize("scheduler", ["static", "step"])
async def test_a_pair_no_model_translates_goes_through_english(
    models_dir: Path, engines: dict[str, Translator], scheduler: str
) -> None:
    de, fr, es = engines["de"], engines["fr"], engines["es"]
    text = "Die Katze sieht den Hund."
    async with serve_models(models_dir, scheduler=scheduler) as (client, _):
        r = await client.post("/translate", json={"q": text, "source": "de", "target": "fr", "alternatives": 2})
        listed = await client.post("/translate", json={"q": [text, " ", "Le chien."], "source": "fr", "target": "es"})
        html = await client.post(
            "/translate", json={"q": f"<p><b>{text}</b></p>", "source": "de", "target": "es", "format": "html"}
        )
    assert r.status_code == 200, r.text
    ranked = through_english(de, fr, text, "de", "fr", n=3)  # one English hypothesis, alternatives of the last stage
    assert r.json() == {"translatedText": ranked[0], "alternatives": ranked[1:], "pivot": "en"}
    assert listed.json() == {
        "translatedText": [
            through_english(fr, es, text, "fr", "es")[0],
            " ",  # a blank text comes back as it was
            through_english(fr, es, "Le chien.", "fr", "es")[0],
        ],
        "pivot": "en",
    }
    english = alone(fr, text, "fr", "en")[0]
    assert es.count_tokens(english) > es.max_source_tokens  # the Marian model takes less: the English was cut
    assert html.status_code == 200 and html.json()["pivot"] == "en"
    assert html.json()["translatedText"].startswith("<p><b>") and html.json()["translatedText"].endswith("</b></p>")


async def test_an_unknown_pair_is_a_400_listing_the_pairs_and_pivots(models_dir: Path) -> None:
    async with serve_models(models_dir) as (client, _):
        es_de = await client.post("/translate", json={"q": "hola", "source": "es", "target": "de"})
        unknown = await client.post("/translate", json={"q": "x", "source": "xx", "target": "en"})
        auto = await client.post("/translate", json={"q": "x", "source": "auto", "target": "it"})
    assert es_de.status_code == 400
    assert es_de.json() == {"error": f"language pair es->de is not served ({SERVED})"}
    assert unknown.status_code == 400 and SERVED in unknown.json()["error"]
    assert auto.status_code == 400 and "does not translate into 'it' (it translates into de, en, es, fr" in auto.text


async def test_auto_chooses_among_every_language_that_reaches_the_target(
    models_dir: Path, engines: dict[str, Translator]
) -> None:
    texts = [
        "Die Katze sieht den Hund und das Wasser.",
        "The cat sees the dog and the water.",
        "Le chat voit le chien.",
        "Le vieux chien voit la lumière bleue du jour et la maison rouge sous la nuit nouvelle du monde.",
    ]
    # the long French text is over the Marian model's limit, but it is passed through: no model's limit applies
    assert engines["es"].max_source_tokens < engines["de"].count_tokens(texts[3]) <= 200
    async with serve_models(models_dir) as (client, _):
        r = await client.post("/translate", json={"q": texts, "source": "auto", "target": "fr"})
        detect = await client.post("/detect", json={"q": "Die Katze sieht den Hund und das Wasser."})
    body = r.json()
    assert [d["language"] for d in body["detectedLanguage"]] == ["de", "en", "fr", "fr"]
    assert body["translatedText"] == [
        through_english(engines["de"], engines["fr"], texts[0], "de", "fr")[0],  # de reaches fr through English
        alone(engines["fr"], texts[1], "en", "fr")[0],
        texts[2],  # already French
        texts[3],
    ]
    assert body["pivot"] == "en"
    assert [d["language"] for d in detect.json()][0] == "de"
    assert {d["language"] for d in detect.json()} == {"de", "en", "es", "fr"}  # the union of the models' languages


async def test_translate_file_is_routed_too(models_dir: Path, engines: dict[str, Translator]) -> None:
    text = "Die Katze sieht den Hund."
    async with serve_models(models_dir) as (client, _):
        r = await client.post(
            "/translate_file", files={"file": ("note.txt", f"{text}\n".encode())}, data={"source": "de", "target": "fr"}
        )
        assert r.status_code == 200, r.text
        translated = await client.get(r.json()["translatedFileUrl"])
    assert translated.text == through_english(engines["de"], engines["fr"], text, "de", "fr")[0] + "\n"


async def test_a_file_is_cut_as_the_model_its_pair_is_routed_to_counts_tokens(models_dir: Path) -> None:
    """de is loaded, fr (its own tokenizer) is not: a file's sentences were sized with de's tokenizer, so one that fr
    counts as over max_sentence_tokens went whole and the file failed; they are now sized as fr counts them."""
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "and",
        "looked",
        "at",
        "the",
        "dog",
        "while",
        "birds",
        "sang",
        "in",
        "old",
        "trees",
    ]
    async with serve_models(models_dir) as (client, app):
        pool = app.state.transduce.pool
        de, fr = pool.entries["de"], pool.entries["fr"]
        counts = [
            (fr.count_tokens(" ".join(words[:n]) + "."), de.count_tokens(" ".join(words[:n]) + "."), n)
            for n in range(3, len(words))
        ]
    gap = [(f, d, n) for f, d, n in counts if f > d >= 8]
    assert gap, counts  # the two tokenizers differ somewhere
    fr_tokens, de_tokens, n = gap[0]
    sentence = " ".join(words[:n]) + "."
    async with serve_models(models_dir, max_sentence_tokens=de_tokens) as (client, app):
        assert app.state.transduce.pool.entries["fr"].state == "unloaded"
        r = await client.post(
            "/translate_file",
            files={"file": ("a.txt", f"{sentence}\n".encode())},
            data={"source": "en", "target": "fr"},
        )
    assert r.status_code == 200, r.text  # before: 400, "a sentence has {fr_tokens} tokens, over the limit"


async def test_a_file_is_cut_to_the_routed_models_own_source_limit(models_dir: Path) -> None:
    """es (converted Marian) takes at most 64 source tokens, under the default max_sentence_tokens (200): a file's
    long sentence was cut to 200 and refused (400 "over the model's limit of 64"); it is cut to the model's limit,
    with several models and with one."""
    from tests.service.harness import serve

    sentence = " ".join(["the cat sat on a mat and looked at the dog while birds sang in old trees"] * 3) + "."
    files, data = {"file": ("a.txt", f"{sentence}\n".encode())}, {"source": "en", "target": "es"}
    async with serve_models(models_dir) as (client, app):
        es = app.state.transduce.pool.entries["es"]
        assert es.max_source_tokens < es.count_tokens(sentence) <= 200
        several = await client.post("/translate_file", files=files, data=data)
    async with serve(Translator(models_dir / "es", device="cpu", intra_threads=1)) as (client, _):
        one = await client.post("/translate_file", files=files, data=data)
    assert several.status_code == 200, several.text
    assert one.status_code == 200, one.text


# --- a failed model is kept apart ----------------------------------------------------------------------------------


class BrokenTranslator(DelegatingTranslator):
    """A model whose every translation raises (its canary fails)."""

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        raise RuntimeError("the decoder produced NaN")


def breaks_es(path: Path, settings: Settings) -> TranslatorLike:
    translator = load_model_dir(path, settings)
    return BrokenTranslator(translator) if path.name == "es" else translator


async def test_a_failed_model_is_reported_never_routed_to_and_takes_nothing_down(
    models_dir: Path, engines: dict[str, Translator]
) -> None:
    with open(models_dir / "fr" / "decoder.onnx", "ab") as f:  # corrupt: no longer matches the manifest's checksum
        f.write(b"garbage")
    (models_dir / "notes").mkdir()  # not a model directory
    async with serve_models(models_dir, loader=breaks_es) as (client, _):
        first = await client.post("/translate", json={"q": "Hello.", "source": "en", "target": "fr"})
        again = await client.post("/translate", json={"q": "Hello.", "source": "en", "target": "fr"})
        spanish = await client.post("/translate", json={"q": "Hello.", "source": "en", "target": "es"})
        german = await client.post("/translate", json={"q": "Hello.", "source": "en", "target": "de"})
        through = await client.post("/translate", json={"q": "Hallo.", "source": "de", "target": "fr"})
        ready = await client.get("/health/ready")
        languages = (await client.get("/languages")).json()
    assert first.status_code == again.status_code == 400
    assert "language pair en->fr is not served (served: de->en, en->de, en->es; through English: de->es)" in first.text
    assert "model fr, which translates it, failed:" in first.text and "does not match the checksum" in first.text
    assert "model fr, which translates en->fr (through English), failed:" in through.text, through.text
    assert spanish.status_code == 400 and "its canary translation failed: RuntimeError" in spanish.text
    assert german.json() == {"translatedText": alone(engines["de"], "Hello.", "en", "de")[0]}
    assert ready.status_code == 200  # de still serves
    models = {m["name"]: m for m in ready.json()["models"]}
    assert {n: m["state"] for n, m in models.items()} == {
        "de": "ready",
        "es": "failed",
        "fr": "failed",
        "notes": "failed",
    }
    assert "manifest.json is missing" in models["notes"]["reason"]
    assert languages == [
        {"code": "de", "name": "German", "targets": ["en"], "pivot_targets": []},
        {"code": "en", "name": "English", "targets": ["de"], "pivot_targets": []},
    ]


async def test_no_model_that_can_serve_is_not_ready(models_dir: Path) -> None:
    for name in ("de", "fr", "es"):
        (models_dir / name / "manifest.json").write_text("{")
    async with serve_models(models_dir) as (client, _):
        ready = await client.get("/health/ready")
        r = await client.post("/translate", json={"q": "Hello.", "source": "en", "target": "de"})
    assert ready.status_code == 503 and ready.json()["error"].startswith("no model can serve: de: ")
    assert r.status_code == 400 and "served: none" in r.text


# --- metrics -------------------------------------------------------------------------------------------------------


async def test_metrics_are_labelled_per_model_and_the_old_names_stay(models_dir: Path) -> None:
    async with serve_models(models_dir) as (client, _):
        for target in ("de", "de", "fr"):
            await client.post("/translate", json={"q": "Hello.", "source": "en", "target": target})
        await client.post("/translate", json={"q": "Hallo.", "source": "de", "target": "es"})
        text = (await client.get("/metrics")).text
    assert metric(text, "transduce_model_requests_total", model="de", outcome="ok") == 3  # 2, and a first stage
    assert metric(text, "transduce_model_requests_total", model="es", outcome="ok") == 1
    assert metric(text, "transduce_model_loads_total", model="fr", outcome="ok") == 1
    assert metric(text, "transduce_model_request_duration_seconds_count", model="fr") == 1
    assert metric(text, "transduce_pivot_texts_total") == 1
    assert metric(text, "transduce_model_state", model="es", state="ready") == 1
    assert metric(text, "transduce_model_memory_bytes", model="fr") > 0
    assert metric(text, "transduce_requests_total", status="200") == 4  # the service-wide names are unchanged
    for name in ("transduce_queue_depth", "transduce_cache_hit_ratio", "transduce_padding_ratio"):
        assert re.search(rf"^{name} ", text, re.M), name


def test_a_directory_that_cannot_be_read_is_a_failed_model_not_a_failed_scan(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model directory the server may not look into, a manifest with a number too big for an int, or a file name
    with a NUL character: each is one failed model (it was a 500 at /admin/reload and a traceback at start-up)."""
    import transduce.service.registry as registry

    huge = models_dir / "huge"
    shutil.copytree(models_dir / "de", huge)
    raw = json.loads((huge / "manifest.json").read_text())
    (huge / "manifest.json").write_text(json.dumps(raw).replace('"max_positions": ', '"max_positions": 1e400, "x": '))
    nul = models_dir / "nul"
    shutil.copytree(models_dir / "de", nul)
    (nul / "manifest.json").write_text(json.dumps({**raw, "checksums": {**raw["checksums"], "a\u0000b": "0"}}))
    (models_dir / "locked").mkdir()
    load = registry.load_manifest

    def denied(path: Path, **kwargs: bool) -> object:
        if Path(path).name == "locked":  # (as root, chmod 000 would not stop the scan)
            raise PermissionError(13, "Permission denied", str(path))
        return load(path, **kwargs)

    monkeypatch.setattr(registry, "load_manifest", denied)
    specs = {spec.name: spec for spec in scan(str(models_dir))}
    assert {n for n, spec in specs.items() if spec.error is None} == {"de", "es", "fr", "nul"}
    assert "lacks a required field or has a wrong type" in str(specs["huge"].error)
    assert "its manifest cannot be read: PermissionError" in str(specs["locked"].error)
    assert specs["nul"].fingerprint  # the odd name counts as missing in the fingerprint


def test_a_route_through_english_blames_a_failed_model_only_if_the_other_stage_exists() -> None:
    table = RouteTable({"fr": [("en", "fr"), ("fr", "en")]})
    manifest = cast(Any, SimpleNamespace(pairs=(("de", "en"), ("en", "de"))))
    failed = {"de": ModelSpec("de", Path("de"), "x", manifest, error="broken")}
    assert "model de" not in table.unsupported("de", "ja", failed, {"de": "broken"})  # no en->ja anywhere
    assert "model de, which translates de->en (through English), failed: broken" in table.unsupported(
        "de", "fr", failed, {"de": "broken"}
    )
