"""The models of a server with ``TRANSDUCE_MODELS``: loaded on first use, kept while used, unloaded least recently
used over the memory budget, swapped on reload.

- **Loading**: a model loads when a request first needs it (or at start-up: the first model, by name, that loads),
  in a worker thread, one load at a time; requests that need a loading model wait for that one load. A load is the
  engine over the directory (every file checked against its manifest's checksum), the model's own
  ``TranslationPipeline`` (its own queue and worker thread: one model's overload never holds up another's requests)
  and a canary sentence through that queue. A model whose load or canary fails is ``failed``: logged, reported in
  /health/ready, never routed to again until a reload reads it again; the other models are untouched.
- **Memory**: a load's cost is the growth of the process's resident memory (VmRSS) across the load and the canary,
  never less than the size of its ONNX graphs (memory an unloaded model freed can be reused by the next load without
  the process growing). With ``memory_budget_mb``, the least recently used models are unloaded, before a load to make
  room for it (its cost as last measured, else its graphs' size) and after it, until the loaded models fit; a model
  with requests in flight or waiting is never unloaded (the budget is then exceeded until it is idle, with a warning),
  and the last loaded model stays (a budget smaller than one model serves one model at a time).
- **Reload** (``reload``): the directories are scanned again; a new directory is added (unloaded), a removed one is
  no longer routed to and unloads once its last request is done, a replaced one (changed fingerprint) that was loaded
  has its new version loaded and canaried first (the old one is never unloaded for the budget meanwhile), then new
  requests go to it while requests already holding the old version finish on it, and the old version unloads when
  idle; a model that had failed is read again (``retried``) and loads on first use. No request fails for a reload. A
  load never reads a directory whose files changed since the scan (its fingerprint): that model fails, saying to
  reload, and an entry a reload retired while it waited to load is not loaded (its requests are routed again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from transduce.engine.errors import BatcherClosedError, DeadlineExceededError, ModelLoadError
from transduce.engine.session import release_memory
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorLike
from transduce.service.model_entry import (
    MB,
    ModelEntry,
    failure,
    gauge_lines,
    graphs_bytes,
    health_lines,
    resident_bytes,
)
from transduce.service.model_metrics import ModelGauge, ModelMetrics
from transduce.service.observability import LatencyWindow, Metrics
from transduce.service.pipeline import TranslationPipeline, run_canary
from transduce.service.registry import ModelSpec, Route, RouteTable, fingerprint, scan

log = logging.getLogger("transduce.service")

ModelLoader = Callable[[Path, Settings], TranslatorLike]  # builds a model directory's translator (blocking)


class ModelUnavailableError(Exception):
    """The model a route needs failed to load or is gone: the request's route is computed again without it."""


class ModelPool:
    """The models of ``settings.models``, their routes, and their loading, unloading and reloading."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        window: LatencyWindow,
        model_metrics: ModelMetrics,
        loader: ModelLoader,
    ) -> None:
        self.settings, self.metrics, self.window, self.model_metrics = settings, metrics, window, model_metrics
        self.loader = loader
        self.entries: dict[str, ModelEntry] = {}
        self.routes = RouteTable({})
        self.retiring: set[ModelEntry] = set()  # replaced or removed, still loaded: in use by earlier requests
        # never unloaded for the budget: versions serving while a reload loads their new versions
        self._pinned: set[ModelEntry] = set()
        self._standby: set[ModelEntry] = set()  # new versions a reload loaded, not yet in place: counted as loaded
        self._reloaded = asyncio.Event()  # clear while a reload runs
        self._reloaded.set()
        self.scanned = self.closing = False
        self.budget_bytes = int(settings.memory_budget_mb * MB)
        self._load_lock = asyncio.Lock()
        self._reload_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._measured: dict[str, int] = {}  # fingerprint -> memory its last load took
        self._over_budget = False
        self.last_load_end = 0.0  # when the last load ended (or failed): the idle release's
        model_metrics.bind(self.gauges, self.budget_bytes)

    @property
    def loading(self) -> bool:
        """Whether a model is loading now (one at a time)."""
        return self._load_lock.locked()

    # --- start, stop, health -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Scan the model directories and load the first model (by name) that loads, which proves the runtime works
        (with one model: that model, as a single-model server does)."""
        specs = await asyncio.to_thread(scan, self.settings.models or "")
        self.entries = {spec.name: self._entry(spec) for spec in specs}
        self._reroute()
        self.scanned = True
        for entry in list(self.entries.values()):
            if entry.state == "unloaded":
                await self._ensure_loaded(entry)
                if entry.state == "ready":
                    break

    async def stop(self, timeout: float) -> None:
        """Refuse new loads, let running ones end, drain every loaded model's queue, all within ``timeout`` seconds
        (one deadline: each stage gets what the ones before it left)."""
        self.closing = True
        end = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, end - time.monotonic())

        loading = [e.loading for e in self.entries.values() if e.loading is not None]
        if loading:
            await asyncio.wait(loading, timeout=left())
        pipelines = [e.pipeline for e in (*self.entries.values(), *self.retiring) if e.pipeline is not None]
        await asyncio.gather(*(p.queue.stop(drain=True, timeout=left()) for p in pipelines))
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=left())

    def readiness(self) -> str | None:
        """None when the server can serve (the scan is done and some model is not failed), else why not."""
        if not self.scanned:
            return "models are being scanned"
        if not self.entries:
            return f"no model directories in {self.settings.models}: add some and reload"
        if all(e.state == "failed" for e in self.entries.values()):
            return "no model can serve: " + "; ".join(f"{n}: {e.reason}" for n, e in self.entries.items())
        return None

    def health(self) -> list[dict[str, Any]]:
        """Every model's state, for /health/ready (``model_entry.health_lines``)."""
        return health_lines(self.entries, self.retiring)

    def gauges(self) -> list[ModelGauge]:
        """Every model's live facts, for /metrics (``model_entry.gauge_lines``)."""
        return gauge_lines(self.entries, self.retiring)

    def loaded(self) -> list[ModelEntry]:
        """Every loaded model version, retiring ones included."""
        return [e for e in (*self.entries.values(), *self.retiring) if e.state == "ready"]

    # --- routing and use -----------------------------------------------------------------------------------------

    def route(self, source: str, target: str) -> Route | None:
        """The route for a pair (loaded models preferred where several serve a stage), or None."""
        return self.routes.route(source, target, lambda name: 0 if self.entries[name].state == "ready" else 1)

    def unsupported(self, source: str, target: str) -> str:
        """Why a pair is refused (the served pairs, the pivots, a failed model that translates it)."""
        failed = {n: e for n, e in self.entries.items() if e.state == "failed"}
        return self.routes.unsupported(
            source, target, {n: e.spec for n, e in failed.items()}, {n: str(e.reason) for n, e in failed.items()}
        )

    @contextlib.asynccontextmanager
    async def use(
        self, names: Sequence[str], *, deadline: float | None = None
    ) -> AsyncIterator[list[TranslationPipeline]]:
        """The pipelines of ``names``, loaded (waiting for their loads) and held so that none is unloaded until the
        block ends. ModelUnavailableError when one is gone or fails to load; DeadlineExceededError when a load is
        still going at ``deadline`` (monotonic; the load goes on for the requests after it)."""
        held: list[ModelEntry] = []
        try:
            for name in names:
                entry = self.entries.get(name)
                if entry is None or entry.state == "failed":
                    raise ModelUnavailableError(name)
                entry.in_flight += 1
                held.append(entry)
                await self._ensure_loaded(entry, deadline)
                if entry.pipeline is None:
                    raise ModelUnavailableError(name)
            yield [e.pipeline for e in held if e.pipeline is not None]
        finally:
            for entry in held:
                self._release(entry)

    def _release(self, entry: ModelEntry) -> None:
        entry.in_flight -= 1
        entry.last_used = time.monotonic()
        if entry.in_flight == 0:
            if entry.retired:
                self._unload(entry, "reload")
            else:
                self._enforce_budget()

    # --- loading and unloading -----------------------------------------------------------------------------------

    def _entry(self, spec: ModelSpec) -> ModelEntry:
        if spec.error is None:
            return ModelEntry(spec)
        log.error("model %s (%s) cannot be served: %s", spec.name, spec.path, spec.error)
        return ModelEntry(spec, state="failed", reason=spec.error)

    def _reroute(self) -> None:
        self.routes = RouteTable({n: e.spec.pairs for n, e in self.entries.items() if e.state != "failed"})

    async def _ensure_loaded(self, entry: ModelEntry, deadline: float | None = None) -> None:
        """Load ``entry`` unless it is ready or failed; concurrent callers wait for the same load, each until its
        ``deadline`` at most."""
        while entry.state not in ("ready", "failed"):
            if self.closing:
                raise BatcherClosedError("the server is shutting down")
            if entry.leaving and not self._reloaded.is_set():  # removed by the reload running: routed once it is done
                left = None if deadline is None else deadline - time.monotonic()
                try:
                    await asyncio.wait_for(self._reloaded.wait(), left)
                except TimeoutError:
                    raise DeadlineExceededError(f"model {entry.spec.name} was being removed at the deadline") from None
                raise ModelUnavailableError(entry.spec.name)
            if entry.retired:  # a reload replaced or removed it, unloaded: the route is computed again
                raise ModelUnavailableError(entry.spec.name)
            if entry.loading is None:
                entry.loading = asyncio.create_task(self._load(entry), name=f"transduce-load-{entry.spec.name}")
            left = None if deadline is None else deadline - time.monotonic()  # at or below 0: only if already done
            try:
                await asyncio.wait_for(asyncio.shield(entry.loading), left)
            except TimeoutError:
                raise DeadlineExceededError(f"model {entry.spec.name} was still loading at the deadline") from None

    async def _load(self, entry: ModelEntry) -> None:
        name, spec = entry.spec.name, entry.spec
        started = time.monotonic()
        try:
            async with self._load_lock:  # one load at a time: each one's memory is measured alone
                if entry.retired or entry.leaving:  # replaced or removed while it waited: its directory may be gone
                    return
                entry.state = "loading"
                self._enforce_budget(self._measured.get(spec.fingerprint) or graphs_bytes(spec), keep=entry)
                if self._tasks:  # what unloaded models free is given back before this load is measured
                    await asyncio.wait(self._tasks)
                # and what the shared arena holds free (freed by other models' batches), which the canary's
                # working memory would otherwise reuse without the process growing
                await asyncio.to_thread(release_memory)
                if entry.retired or entry.leaving:  # (again: a reload may have run meanwhile) routed again
                    entry.state = "unloaded"
                    return
                if await asyncio.to_thread(fingerprint, spec.path, spec.manifest) != spec.fingerprint:
                    raise ModelLoadError(  # (it loaded the new files as the old version, routed by the old pairs)
                        "its files changed on disk since the models were scanned: reload the server (SIGHUP or "
                        "POST /admin/reload) to serve what is there now"
                    )
                started, before = time.monotonic(), resident_bytes()
                translator = await asyncio.to_thread(self.loader, spec.path, self.settings)
                pipeline = TranslationPipeline(translator, self.settings, self.metrics, self.window)
                await pipeline.queue.start()
                try:
                    source, target, text = await run_canary(pipeline, self.settings)
                except Exception as exc:
                    await pipeline.queue.stop(drain=False)
                    raise ModelLoadError(f"its canary translation failed: {failure(exc)}") from exc
                grown = resident_bytes() - before
                entry.memory_bytes = max(grown, graphs_bytes(spec))
                entry.load_ms = (time.monotonic() - started) * 1000
                entry.translator, entry.pipeline, entry.state = translator, pipeline, "ready"
                entry.last_used = time.monotonic()
                self._measured[spec.fingerprint] = entry.memory_bytes
        except Exception as exc:
            entry.state, entry.reason = "failed", failure(exc)
            log.error("model %s (%s) cannot be served: %s", name, spec.path, entry.reason)
            self.model_metrics.loaded(name, time.monotonic() - started, ok=False)
            self._reroute()
        else:
            self.model_metrics.loaded(name, entry.load_ms / 1000, ok=True)
            log.info(
                "model %s loaded in %.0f ms on %s, resident memory +%.1f MB (measured %.1f MB); canary %s->%s %r -> %r",
                name,
                entry.load_ms,
                translator.provider,
                entry.memory_bytes / MB,
                grown / MB,
                source,
                target,
                self.settings.canary_text,
                text,
            )
            if entry.retired:  # replaced or removed while it loaded: it serves those waiting for it, then goes
                self.retiring.add(entry)
                if entry.in_flight == 0:
                    self._unload(entry, "reload")
            self._enforce_budget(keep=entry)
        finally:
            entry.loading = None
            self.last_load_end = time.monotonic()

    def _used_bytes(self) -> int:  # the new versions a reload loaded and has not put in place yet count too
        return sum(e.memory_bytes for e in (*self.loaded(), *self._standby) if e.state == "ready")

    def _enforce_budget(self, incoming: int = 0, keep: ModelEntry | None = None) -> None:
        """Unload idle models, least recently used first, until the loaded ones (and ``incoming`` bytes) fit."""
        if self.budget_bytes <= 0:
            return
        while self._used_bytes() + incoming > self.budget_bytes:
            if len(self.loaded()) + (1 if incoming else 0) <= 1:
                break  # one model always stays, even over the budget: a budget below one model serves one at a time
            idle = [
                e
                for e in self.entries.values()
                if e.state == "ready" and e.in_flight == 0 and e is not keep and e not in self._pinned
            ]
            if not idle:
                if not self._over_budget:
                    log.warning(
                        "models use %.1f MB (%s%s), over the memory budget of %.0f MB (memory_budget_mb), and none "
                        "can be unloaded: each is in use or the one loading",
                        (self._used_bytes() + incoming) / MB,
                        ", ".join(f"{e.spec.name} {e.memory_bytes / MB:.1f} MB" for e in self.loaded()),
                        f", {incoming / MB:.1f} MB about to load" if incoming else "",
                        self.settings.memory_budget_mb,
                    )
                self._over_budget = True
                return
            self._unload(min(idle, key=lambda e: e.last_used), "budget")
        self._over_budget = False

    def _unload(self, entry: ModelEntry, reason: str) -> None:
        """Forget ``entry``'s engine (idle: nothing is queued) and stop its queue in the background."""
        pipeline = entry.pipeline
        self.retiring.discard(entry)
        if pipeline is None:
            return
        log.info("model %s unloaded (%s), %.1f MB", entry.spec.name, reason, entry.memory_bytes / MB)
        entry.translator = entry.pipeline = None
        entry.state, entry.memory_bytes = "unloaded", 0
        self.model_metrics.evicted(entry.spec.name, reason)
        self._spawn(self._stop(pipeline))

    async def _stop(self, pipeline: TranslationPipeline) -> None:
        await pipeline.queue.stop(drain=True, timeout=self.settings.shutdown_grace_s)
        del pipeline
        await asyncio.to_thread(release_memory)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _retire(self, entry: ModelEntry) -> None:
        """A reload removed or replaced ``entry``: it unloads once its requests are done."""
        entry.retired = True
        if entry.state == "ready":
            self.retiring.add(entry)
            if entry.in_flight == 0:
                self._unload(entry, "reload")

    # --- reload --------------------------------------------------------------------------------------------------

    def _swap(self, changed: Sequence[str], fresh: dict[str, ModelEntry], removed: list[str], added: list[str]) -> None:
        """Put the ``fresh`` entries of ``changed`` and ``added`` in place, retiring the ones they replace and those
        ``removed``, and route again."""
        entries = dict(self.entries)
        for n in removed:
            self._retire(entries.pop(n))
        for n in changed:
            self._retire(entries[n])
            entries[n] = fresh[n]
        entries.update((n, fresh[n]) for n in added)
        self.entries = dict(sorted(entries.items()))
        self._reroute()

    async def reload(self) -> dict[str, Any]:
        """Scan again and apply what changed (see the module's docstring); returns what was added, removed,
        replaced and left unchanged, and the models that failed."""
        async with self._reload_lock:
            specs = {s.name: s for s in await asyncio.to_thread(scan, self.settings.models or "")}
            old = dict(self.entries)
            added = sorted(n for n in specs if n not in old)
            removed = sorted(n for n in old if n not in specs)
            replaced = sorted(n for n in specs if n in old and specs[n].fingerprint != old[n].spec.fingerprint)
            retried = sorted(n for n in specs if n in old and n not in replaced and old[n].state == "failed")
            fresh = {n: self._entry(specs[n]) for n in (*added, *replaced, *retried)}

            # a loaded model's new version is loaded and canaried while the old one serves (pinned: never unloaded
            # for the budget meanwhile, nor are the new versions already loaded, counted in the budget); everything
            # else changes at once, so that no request loads an old version whose files are gone
            # (a model still loading may yet fail its checks: it is swapped at once and its waiters routed again)
            preload = [n for n in replaced if old[n].state == "ready" and fresh[n].state == "unloaded"]
            for n in removed:  # until the swap: serving if loaded, never loaded (its directory may be gone)
                old[n].leaving = True
            self._reloaded.clear()
            try:
                self._swap([n for n in (*replaced, *retried) if n not in preload], fresh, [], added)
                self._pinned.update(old[n] for n in preload)
                for n in preload:
                    self._standby.add(fresh[n])
                    await self._ensure_loaded(fresh[n])
            finally:
                self._pinned.difference_update(old[n] for n in preload)
                self._standby.difference_update(fresh[n] for n in preload)
                self._swap(preload, fresh, removed, [])  # removed last: a new version may take their pairs over
                self._reloaded.set()
            report = {
                "added": added,
                "removed": removed,
                "replaced": replaced,
                "retried": retried,
                "unchanged": sorted(n for n in specs if n in old and n not in replaced and n not in retried),
                "failed": {n: str(e.reason) for n, e in self.entries.items() if e.state == "failed"},
            }
            log.info(
                "models reloaded: %s",
                "; ".join(f"{k} {', '.join(v)}" for k, v in report.items() if v and k != "failed") or "no change",
            )
            return report
