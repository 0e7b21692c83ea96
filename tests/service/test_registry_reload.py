"""Reloads of several models, on fake model directories (a manifest only, served by the FakeTranslator): pairs moved
between models, a model caught loading by a reload, versions retiring under one name."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import pytest

from tests.service.harness import FakeTranslator, serve_models
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorLike

pytestmark = pytest.mark.anyio


def write_model(root: Path, name: str, pairs: list[tuple[str, str]], model_name: str) -> None:
    """A model directory holding only its manifest (the loader below never opens a graph)."""
    (root / name).mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": "transduce-onnx",
        "model_name": model_name,
        "pairs": [list(p) for p in pairs],
        "languages": sorted({code for pair in pairs for code in pair}),
    }
    (root / name / "manifest.json").write_text(json.dumps(manifest))


class Loader:
    """FakeTranslators with each manifest's pairs; ``hold[model_name]`` holds that version's load until set."""

    def __init__(self) -> None:
        self.hold: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}

    def __call__(self, path: Path, settings: Settings) -> TranslatorLike:
        manifest = json.loads((path / "manifest.json").read_text())
        name = manifest["model_name"]
        if name in self.hold:
            self.entered.setdefault(name, threading.Event()).set()
            assert self.hold[name].wait(30)
        fake = FakeTranslator(pairs=[(a, b) for a, b in manifest["pairs"]])
        fake.model_name = name
        return fake


def to(target: str) -> dict[str, object]:
    return {"q": "Hello", "source": "en", "target": target}


@pytest.fixture
def read_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan reads these manifests as the real ones' (only the fields the pool uses)."""
    import transduce.service.registry as registry
    from transduce.engine.manifest import Manifest

    def load(path: Path, check_files: bool = True) -> Manifest:
        raw = json.loads((Path(path) / "manifest.json").read_text())
        pairs = tuple((a, b) for a, b in raw["pairs"])
        return Manifest(
            Path(path), raw["model_name"], 1, 1, 1, 10, 512, 0, 1, 2, tuple(raw["languages"]), pairs, "", raw
        )

    monkeypatch.setattr(registry, "load_manifest", load)


@pytest.mark.usefixtures("read_manifests")
async def test_a_pair_moved_from_a_removed_model_to_a_replaced_one_is_served_throughout(tmp_path: Path) -> None:
    """a (en->it) is removed and b (loaded) replaced by a version that also translates en->it: while the new b
    loads, en->it was refused (the removal was applied before the preload)."""
    root = tmp_path / "models"
    write_model(root, "a", [("en", "it")], "a-v1")
    write_model(root, "b", [("en", "de")], "b-v1")
    loader = Loader()
    async with serve_models(root, loader=loader) as (client, app):
        pool = app.state.transduce.pool
        assert (await client.post("/translate", json=to("de"))).status_code == 200
        assert (await client.post("/translate", json=to("it"))).status_code == 200
        shutil.rmtree(root / "a")
        write_model(root, "b", [("en", "de"), ("en", "it")], "b-v2")
        loader.hold["b-v2"] = release = threading.Event()
        reload = asyncio.create_task(pool.reload())
        while not (loader.entered.get("b-v2") and loader.entered["b-v2"].is_set()):
            await asyncio.sleep(0.01)
        during = await client.post("/translate", json=to("it"))
        release.set()
        report = await reload
        after = await client.post("/translate", json=to("it"))
    assert during.status_code == 200, during.text
    assert report["removed"] == ["a"] and report["replaced"] == ["b"] and after.status_code == 200


@pytest.mark.usefixtures("read_manifests")
async def test_a_model_caught_loading_by_a_reload_answers_its_waiters_with_the_new_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """z is loading (waiting for the memory release) when its directory is replaced and the server reloaded: the
    reload preloaded the new version and kept the old entry, whose load then failed its fingerprint: a 400."""
    import transduce.service.models as models

    root = tmp_path / "models"
    write_model(root, "b", [("en", "de")], "b-v1")
    write_model(root, "z", [("en", "it")], "z-v1")
    gate, entered = threading.Event(), threading.Event()
    release_memory = models.release_memory

    def slow_release() -> None:
        if not gate.is_set():
            entered.set()
            assert gate.wait(20)
        release_memory()

    async with serve_models(root, loader=Loader()) as (client, app):
        pool = app.state.transduce.pool
        monkeypatch.setattr(models, "release_memory", slow_release)
        waiting = asyncio.create_task(client.post("/translate", json=to("it")))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        write_model(root, "z", [("en", "it")], "z-v2")
        reload = asyncio.create_task(pool.reload())
        await asyncio.sleep(0.1)
        gate.set()
        answer = await waiting
        await reload
    assert answer.status_code == 200, answer.text
    assert pool.entries["z"].spec.model_name == "z-v2"


@pytest.mark.usefixtures("read_manifests")
async def test_versions_of_a_removed_model_still_in_use_are_one_line(tmp_path: Path) -> None:
    root = tmp_path / "models"
    write_model(root, "a", [("en", "it")], "a-v1")
    write_model(root, "b", [("en", "de")], "b-v1")
    async with serve_models(root, loader=Loader()) as (client, app):
        pool = app.state.transduce.pool
        async with pool.use(["a"]):
            write_model(root, "a", [("en", "it")], "a-v2")
            await pool.reload()  # a-v1 retiring, held
            async with pool.use(["a"]):
                shutil.rmtree(root / "a")
                await pool.reload()  # a-v2 retiring too, held
                models = (await client.get("/health/ready")).json()["models"]
    lines = [m for m in models if m["name"] == "a"]
    assert len(lines) == 1 and lines[0]["state"] == "retiring" and len(lines[0]["retiring"]) == 1, models


@pytest.mark.usefixtures("read_manifests")
async def test_a_removed_model_is_not_loaded_while_the_reload_preloads(tmp_path: Path) -> None:
    """b and c loaded and replaced, z (never loaded) removed, its pair taken over by the new c: a request for it
    while the new b loaded queued a load of z, which ran before c's preload and failed (its directory gone): a 400.
    A model being removed is never loaded; its requests wait for the reload and go to the new route."""
    root = tmp_path / "models"
    write_model(root, "b", [("en", "de")], "b-v1")
    write_model(root, "c", [("en", "fr")], "c-v1")
    write_model(root, "z", [("en", "it")], "z-v1")
    loader = Loader()
    async with serve_models(root, loader=loader) as (client, app):
        pool = app.state.transduce.pool
        for target in ("de", "fr"):
            assert (await client.post("/translate", json=to(target))).status_code == 200
        assert pool.entries["z"].state == "unloaded"
        shutil.rmtree(root / "z")
        write_model(root, "b", [("en", "de")], "b-v2")
        write_model(root, "c", [("en", "fr"), ("en", "it")], "c-v2")
        loader.hold["b-v2"] = release = threading.Event()
        reload = asyncio.create_task(pool.reload())
        while not (loader.entered.get("b-v2") and loader.entered["b-v2"].is_set()):
            await asyncio.sleep(0.01)
        during = asyncio.create_task(client.post("/translate", json=to("it")))
        await asyncio.sleep(0.2)
        release.set()
        report = await reload
        answer = await during
    assert report["removed"] == ["z"] and sorted(report["replaced"]) == ["b", "c"]
    assert answer.status_code == 200, answer.text
