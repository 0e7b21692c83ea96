"""Operating several models (TRANSDUCE_MODELS) through the real app: lazy loading, eviction under a memory budget,
one model's overload not blocking another, hot reload (POST /admin/reload during a burst; SIGHUP under `transduce
serve`) with no failed request."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.service.harness import (
    FakeTranslator,
    Gate,
    free_port,
    metric,
    serve,
    serve_models,
    wait_ready,
    wait_until,
)
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorLike
from transduce.service.main import load_model_dir
from transduce.service.models import ModelLoader

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]
ADMIN = {"Authorization": "Bearer s3cret"}


def gated(gate: Gate, held: Callable[[TranslatorLike], bool]) -> ModelLoader:
    """A loader whose translators for which ``held(translator)`` pass their translate calls through ``gate``."""

    def load(path: Path, settings: Settings) -> TranslatorLike:
        translator = load_model_dir(path, settings)
        return gate.guard(translator) if held(translator) else translator

    return load


def states(app: object) -> dict[str, str]:
    pool = app.state.transduce.pool  # type: ignore[attr-defined]
    return {name: entry.state for name, entry in pool.entries.items()}


def to(target: str, text: str = "Hello world.", source: str = "en") -> dict[str, object]:
    return {"q": text, "source": source, "target": target, "beam_size": 1}


async def test_models_load_on_first_use_and_concurrent_first_requests_share_one_load(models_dir: Path) -> None:
    async with serve_models(models_dir) as (client, app):
        assert states(app) == {"de": "ready", "es": "unloaded", "fr": "unloaded"}
        answers = await asyncio.gather(*(client.post("/translate", json=to("fr", f"dog {i}")) for i in range(6)))
        text = (await client.get("/metrics")).text
        assert states(app) == {"de": "ready", "es": "unloaded", "fr": "ready"}
    assert [r.status_code for r in answers] == [200] * 6
    assert metric(text, "transduce_model_loads_total", model="fr", outcome="ok") == 1


async def test_a_request_waits_for_a_cold_model_no_longer_than_its_deadline(models_dir: Path) -> None:
    """A request for a model not loaded yet waited for the whole load, past request_timeout_s: it now gets its 504
    at its deadline, and the load goes on for the requests after it."""

    def slow(path: Path, settings: Settings) -> TranslatorLike:
        if path.name == "fr":
            time.sleep(1.5)  # in the loader's thread, as a big model's load
        return load_model_dir(path, settings)

    async with serve_models(models_dir, loader=slow, request_timeout_s=0.4) as (client, app):
        began = time.monotonic()
        late = await client.post("/translate", json=to("fr"))
        waited = time.monotonic() - began
        assert late.status_code == 504 and "within 0.4 s" in late.json()["error"]
        assert waited < 1.2 and states(app)["fr"] == "loading"  # answered while the load goes on
        await wait_until(lambda: states(app)["fr"] == "ready", 30)
        assert (await client.post("/translate", json=to("fr"))).status_code == 200


async def test_a_single_model_loads_at_start_up(models_dir: Path) -> None:
    async with serve_models(models_dir / "fr") as (client, app):  # a model directory itself: one model
        assert states(app) == {"fr": "ready"}
        r = await client.post("/translate", json=to("fr"))
    assert r.status_code == 200 and "pivot" not in r.json()


async def test_least_recently_used_models_are_evicted_over_the_budget_but_never_in_flight(models_dir: Path) -> None:
    gate = Gate()
    loader = gated(gate, lambda t: t.model_name == "tiny-random")  # the en<->de model
    async with serve_models(models_dir, loader=loader, memory_budget_mb=0.01) as (client, app):  # below one model
        assert (await client.post("/translate", json=to("fr"))).status_code == 200
        assert states(app) == {"de": "unloaded", "es": "unloaded", "fr": "ready"}  # de made room for fr
        assert (await client.post("/translate", json=to("de"))).status_code == 200
        assert states(app) == {"de": "ready", "es": "unloaded", "fr": "unloaded"}
        gate.hold()
        in_flight = asyncio.create_task(client.post("/translate", json=to("de", "The cat.")))
        await gate.wait_entered()
        spanish = await client.post("/translate", json=to("es"))  # loads es; de is in use, so it stays
        assert spanish.status_code == 200
        assert states(app) == {"de": "ready", "es": "unloaded", "fr": "unloaded"}  # es, idle again, went instead
        gate.release()
        assert (await in_flight).status_code == 200
        text = (await client.get("/metrics")).text
    assert metric(text, "transduce_model_evictions_total", model="de", reason="budget") == 1
    assert metric(text, "transduce_model_evictions_total", model="fr", reason="budget") == 1
    assert metric(text, "transduce_model_evictions_total", model="es", reason="budget") == 1
    assert metric(text, "transduce_memory_budget_bytes") == int(0.01 * 2**20)


async def test_without_a_budget_used_models_stay(models_dir: Path) -> None:
    async with serve_models(models_dir) as (client, app):
        for target in ("fr", "es", "de"):
            assert (await client.post("/translate", json=to(target))).status_code == 200
        assert set(states(app).values()) == {"ready"}


async def test_one_models_overload_does_not_block_another(models_dir: Path) -> None:
    gate = Gate()
    loader = gated(gate, lambda t: t.model_name == "tiny-random")
    async with serve_models(models_dir, loader=loader, max_queue_items=4) as (client, app):
        await client.post("/translate", json=to("fr"))  # fr loaded
        gate.hold()
        running = asyncio.create_task(client.post("/translate", json=to("de", "One.")))
        await gate.wait_entered()
        queued = asyncio.create_task(client.post("/translate", json=to("de", "Two. Three. Four. Five.")))
        pool = app.state.transduce.pool
        await wait_until(lambda: pool.entries["de"].pipeline.queue.queue_depth == 4)
        full = await client.post("/translate", json=to("de", "Six."))
        started = time.monotonic()
        french = await client.post("/translate", json=to("fr", "The dog runs."))
        took = time.monotonic() - started
        gate.release()
        answers = await asyncio.gather(running, queued)
    assert full.status_code == 503 and "queue is full" in full.json()["error"] and full.headers["retry-after"]
    assert french.status_code == 200 and took < 5  # fr has its own queue and worker
    assert [r.status_code for r in answers] == [200, 200]


async def test_hot_reload_during_a_burst_fails_no_request(models_dir: Path, tmp_path: Path) -> None:
    """fr is replaced while a request holds its old version: new requests go to the new version at once, the held
    one finishes on the old one, which then unloads; es is removed and the same model added as spanish; a burst of
    requests to every model runs throughout, and every one of them succeeds."""
    gate = Gate()
    loader = gated(gate, lambda t: t.model_name == "tiny-random-fr")  # only fr's first version is held
    async with serve_models(models_dir, loader=loader, admin_key="s3cret") as (client, app):
        pool = app.state.transduce.pool
        for target in ("fr", "es"):
            assert (await client.post("/translate", json=to(target))).status_code == 200
        old = pool.entries["fr"]
        gate.hold()
        held = asyncio.create_task(client.post("/translate", json=to("fr", "The old dog.")))
        await gate.wait_entered()
        statuses: list[int] = []
        stop = asyncio.Event()

        async def burst(target: str) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                r = await client.post("/translate", json=to(target, f"The cat {i}."))
                statuses.append(r.status_code)

        clients = [asyncio.create_task(burst(target)) for target in ("de", "de", "es", "fr")]
        await wait_until(lambda: len(statuses) >= 10, timeout_s=30)
        shutil.copytree(models_dir / "fr", models_dir / ".staging" / "fr")  # the new version, prepared aside
        manifest = models_dir / ".staging" / "fr" / "manifest.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "model_name": "tiny-random-fr-v2"}))
        os.rename(models_dir / "fr", tmp_path / "fr-old")
        os.rename(models_dir / ".staging" / "fr", models_dir / "fr")
        os.rename(models_dir / "es", models_dir / "spanish")
        report = await client.post("/admin/reload", headers=ADMIN)
        assert report.status_code == 200, report.text
        assert report.json() == {
            "added": ["spanish"],
            "removed": ["es"],
            "replaced": ["fr"],
            "retried": [],
            "unchanged": ["de"],
            "failed": {},
        }
        new = await asyncio.wait_for(client.post("/translate", json=to("fr", "The new dog.")), 10)
        assert new.status_code == 200  # answered by the new version while the old one is still held
        assert pool.entries["fr"] is not old and pool.entries["fr"].spec.model_name == "tiny-random-fr-v2"
        assert old in pool.retiring and old.state == "ready" and not held.done()
        during = {m["name"]: m for m in (await client.get("/health/ready")).json()["models"]}  # one line a name
        assert during["fr"]["state"] == "ready" and during["fr"]["model"] == "tiny-random-fr-v2"
        assert [v["model"] for v in during["fr"]["retiring"]] == ["tiny-random-fr"]
        assert during["fr"]["retiring"][0]["in_flight"] >= 1  # the held request (and burst ones held with it)
        in_use = metric((await client.get("/metrics")).text, "transduce_model_memory_bytes", model="fr")
        assert in_use == old.memory_bytes + pool.entries["fr"].memory_bytes  # the old version's memory counts
        gate.release()
        assert (await held).status_code == 200
        await wait_until(lambda: old.state == "unloaded" and not pool.retiring, timeout_s=10)
        count = len(statuses)
        await wait_until(lambda: len(statuses) >= count + 10, timeout_s=30)  # the burst goes on after the swap
        stop.set()
        await asyncio.gather(*clients)
        ready = (await client.get("/health/ready")).json()
        languages = (await client.get("/languages")).json()
    assert len(statuses) > 20 and set(statuses) == {200}, [s for s in statuses if s != 200]
    assert {m["name"]: m["model"] for m in ready["models"]}["fr"] == "tiny-random-fr-v2"
    assert {m["name"] for m in ready["models"]} == {"de", "fr", "spanish"}
    assert [lang["targets"] for lang in languages if lang["code"] == "en"] == [["de", "es", "fr"]]


def staged_swap(models_dir: Path, name: str, aside: Path, model_name: str) -> None:
    """README's replacement: a copy prepared beside the models (a hidden directory), then renamed into place."""
    shutil.copytree(models_dir / name, models_dir / ".staging" / name)
    manifest = models_dir / ".staging" / name / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "model_name": model_name}))
    os.rename(models_dir / name, aside)
    os.rename(models_dir / ".staging" / name, models_dir / name)


async def test_a_reload_under_a_budget_keeps_the_old_version_until_the_new_one_serves(
    models_dir: Path, tmp_path: Path
) -> None:
    """With a budget below one model, replacing a loaded model unloaded the version serving to make room for the new
    one, a request then loaded the old entry again from the new files, and the new version was evicted: one load of
    the new version now, the old one kept (over the budget, logged) until it is idle."""
    async with serve_models(models_dir, memory_budget_mb=0.01, admin_key="s3cret") as (client, app):
        pool = app.state.transduce.pool
        assert (await client.post("/translate", json=to("fr"))).status_code == 200
        old = pool.entries["fr"]
        staged_swap(models_dir, "fr", tmp_path / "fr-old", "tiny-random-fr-v2")
        report = await client.post("/admin/reload", headers=ADMIN)
        assert report.status_code == 200 and report.json()["replaced"] == ["fr"], report.text
        answer = await client.post("/translate", json=to("fr"))
        text = (await client.get("/metrics")).text
        assert pool.entries["fr"].state == "ready" and pool.entries["fr"].spec.model_name == "tiny-random-fr-v2"
        assert old.state == "unloaded" and not pool.retiring
    assert answer.status_code == 200
    assert metric(text, "transduce_model_loads_total", model="fr", outcome="ok") == 2  # the first, then the new one
    assert metric(text, "transduce_model_evictions_total", model="fr", reason="budget") == 0


def held_load(model_name: str, release: threading.Event) -> ModelLoader:
    """A loader that holds the load of the version exported as ``model_name`` until ``release`` is set."""

    def load(path: Path, settings: Settings) -> TranslatorLike:
        if json.loads((path / "manifest.json").read_text()).get("model_name") == model_name:
            assert release.wait(60)
        return load_model_dir(path, settings)

    return load


async def test_requests_during_a_reload_of_several_models_are_answered(
    models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All three models replaced while the new de loads (held): under a budget the old fr, still the version
    served, was unloaded for it and then failed its load (its files had changed: 400); es, not loaded, kept its old
    entry until every preload ended, and a request loaded it (400). Now every version serving stays until the swap,
    the new ones count in the budget, and a model not loaded is swapped at once."""
    import transduce.service.models as models

    monkeypatch.setattr(models, "graphs_bytes", lambda spec: 10 * 2**20)  # 10 MB a model, measured as that
    monkeypatch.setattr(models, "resident_bytes", lambda: 0)
    release = threading.Event()
    async with serve_models(
        models_dir, loader=held_load("de-v2", release), memory_budget_mb=25, admin_key="s3cret"
    ) as (client, app):
        pool = app.state.transduce.pool
        assert (await client.post("/translate", json=to("fr"))).status_code == 200
        assert {n: e.state for n, e in pool.entries.items()} == {"de": "ready", "es": "unloaded", "fr": "ready"}
        for name in ("de", "es", "fr"):
            staged_swap(models_dir, name, tmp_path / f"{name}-old", f"{name}-v2")
        reload = asyncio.create_task(client.post("/admin/reload", headers=ADMIN))
        await wait_until(lambda: pool.loading, timeout_s=20)  # the new de's load, held
        french = await client.post("/translate", json=to("fr"))  # the old version, still served
        spanish = asyncio.create_task(client.post("/translate", json=to("es")))  # the new es, after the held load
        await asyncio.sleep(0.3)
        assert pool.entries["fr"].spec.model_name == "tiny-random-fr" and pool.entries["fr"].state == "ready"
        release.set()
        during = [french, await spanish]
        report = await reload
        after = await client.post("/translate", json=to("fr"))
    assert [r.status_code for r in during] == [200, 200], [r.text for r in during]
    assert report.json()["replaced"] == ["de", "es", "fr"] and report.json()["failed"] == {}
    assert after.status_code == 200


async def test_a_model_whose_files_changed_before_a_reload_is_not_loaded_as_the_old_one(
    models_dir: Path, tmp_path: Path
) -> None:
    """es is swapped on disk (not loaded yet) and a request comes before the reload: the old entry loaded the new
    files and served them under the old pairs; it is now a failed model that says to reload, and the reload serves
    the new version."""
    async with serve_models(models_dir, admin_key="s3cret") as (client, app):
        assert app.state.transduce.pool.entries["es"].state == "unloaded"
        staged_swap(models_dir, "es", tmp_path / "es-old", "marian-es-v2")
        early = await client.post("/translate", json=to("es"))
        ready = {m["name"]: m for m in (await client.get("/health/ready")).json()["models"]}
        report = await client.post("/admin/reload", headers=ADMIN)
        late = await client.post("/translate", json=to("es"))
    assert early.status_code == 400 and "files changed on disk since the models were scanned" in early.text
    assert ready["es"]["state"] == "failed" and "reload the server" in ready["es"]["reason"]
    assert report.json()["replaced"] == ["es"] and late.status_code == 200, late.text


async def test_the_admin_endpoint_needs_its_key(models_dir: Path) -> None:
    async with serve_models(models_dir) as (client, _):
        absent = await client.post("/admin/reload", headers=ADMIN)
    async with serve_models(models_dir, admin_key="s3cret") as (client, _):
        missing = await client.post("/admin/reload")
        wrong = await client.post("/admin/reload", headers={"X-Admin-Key": "guess"})
        right = await client.post("/admin/reload", headers={"X-Admin-Key": "s3cret"})
    async with serve(FakeTranslator(), admin_key="s3cret") as (client, _):
        single = await client.post("/admin/reload", headers=ADMIN)
    assert absent.status_code == 404 and absent.json() == {"error": "Not Found"}
    assert missing.status_code == 401 and "Authorization: Bearer KEY" in missing.json()["error"]
    assert wrong.status_code == 403 and wrong.json() == {"error": "invalid admin key"}
    assert right.status_code == 200 and right.json()["unchanged"] == ["de", "es", "fr"]
    assert single.status_code == 409 and "TRANSDUCE_MODELS" in single.json()["error"]


async def test_a_reload_that_cannot_scan_keeps_serving_the_models(models_dir: Path, tmp_path: Path) -> None:
    async with serve_models(models_dir, admin_key="s3cret") as (client, _):
        os.rename(models_dir, tmp_path / "elsewhere")
        r = await client.post("/admin/reload", headers=ADMIN)
        still = await client.post("/translate", json=to("de"))  # loaded at start-up: its sessions are in memory
    assert r.status_code == 503 and r.json()["error"].startswith("models not reloaded: models (TRANSDUCE_MODELS): ")
    assert still.status_code == 200


def test_sighup_rescans_the_models_under_transduce_serve(models_dir: Path, tiny_fr_model_dir: Path) -> None:
    shutil.rmtree(models_dir / "fr")
    shutil.rmtree(models_dir / "es")
    port = free_port()
    env = {**os.environ, "TRANSDUCE_MODELS": str(models_dir), "TRANSDUCE_PORT": str(port), "TRANSDUCE_LOG_JSON": "0"}
    env.pop("TRANSDUCE_MODEL_DIR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "transduce", "serve", "--device", "cpu"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout_s=60)
        before = httpx.post(f"{url}/translate", json=to("fr"), timeout=10)
        shutil.copytree(tiny_fr_model_dir, models_dir / "fr")
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            codes = {lang["code"] for lang in httpx.get(f"{url}/languages", timeout=5).json()}
            if "fr" in codes:
                break
            time.sleep(0.1)
        after = httpx.post(f"{url}/translate", json=to("fr"), timeout=30)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert before.status_code == 400 and "en->fr is not served" in before.text
    assert after.status_code == 200, after.text
    assert proc.returncode == 0, out.decode()[-2000:]
    assert b"models reloaded: added fr" in out


def test_the_readme_example_works(tiny_model_dir: Path, tiny_fr_model_dir: Path, tmp_path: Path) -> None:
    """The "Serving many models" commands: `transduce serve` as written, over the same layout built from the tiny
    models (de<->en and en<->fr), then every curl command."""
    from tests.test_readme import BIN, shell_lines

    lines = shell_lines("Serving many models")
    command = next(line for line in lines if line.endswith("transduce serve"))
    curls = [line for line in lines if line.startswith("curl")]
    assert len(curls) == 4
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "en-de")
    shutil.copytree(tiny_fr_model_dir, tmp_path / "models" / "en-fr")
    port = free_port()
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "TRANSDUCE_PORT": str(port),
        "TRANSDUCE_DEVICE": "cpu",
        "HOME": str(tmp_path),
    }
    proc = subprocess.Popen(  # exec: the signal at the end reaches the server, not the shell
        command.replace("transduce serve", "exec transduce serve"),
        shell=True,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    answers = []
    try:
        wait_ready(url, timeout_s=60)
        for curl in curls:
            run = subprocess.run(
                curl.replace("http://127.0.0.1:5000", url) + " -w '\\n%{http_code}'",
                shell=True,
                capture_output=True,
                text=True,
                timeout=60,
            )
            body, _, status = run.stdout.rpartition("\n")
            assert run.returncode == 0 and status == "200", (curl, status, body[:300])
            answers.append(json.loads(body))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, out.decode()[-2000:]
    languages, translated, ready, reloaded = answers
    assert [(lang["code"], lang["targets"], lang["pivot_targets"]) for lang in languages] == [
        ("de", ["en", "fr"], ["fr"]),
        ("en", ["de", "fr"], []),
        ("fr", ["de", "en"], ["de"]),
    ]
    assert translated["pivot"] == "en" and len(translated["alternatives"]) == 1
    assert {m["name"] for m in ready["models"]} == {"en-de", "en-fr"}
    assert reloaded["unchanged"] == ["en-de", "en-fr"]


async def test_the_pools_stop_keeps_to_one_deadline(tmp_path: Path) -> None:
    """A load that never ends, a queue that drains to its timeout and a task that never ends: stop(timeout) returns
    after about ``timeout`` in all, not after each stage's."""
    from types import SimpleNamespace

    from transduce.service.model_metrics import ModelMetrics
    from transduce.service.models import ModelPool
    from transduce.service.observability import LatencyWindow, Metrics

    metrics = Metrics()
    pool = ModelPool(
        Settings(models=str(tmp_path)), metrics, LatencyWindow(), ModelMetrics(metrics.registry), load_model_dir
    )
    asked: list[float] = []

    class SlowQueue:
        async def stop(self, *, drain: bool, timeout: float) -> None:
            asked.append(timeout)
            await asyncio.sleep(timeout)

    never = asyncio.get_running_loop().create_future()
    pool.entries = {"a": SimpleNamespace(loading=never, pipeline=SimpleNamespace(queue=SlowQueue()))}  # type: ignore[dict-item]
    task = asyncio.ensure_future(asyncio.sleep(60))
    pool._tasks.add(task)
    started = time.monotonic()
    await pool.stop(0.6)
    took = time.monotonic() - started
    task.cancel()
    assert pool.closing and took < 1.0, took  # each stage given the whole 0.6 s took 1.8 s
    assert len(asked) == 1 and asked[0] < 0.1  # the load used the time: the queue got what was left
