"""create_app(model_dir): the FastAPI application, with a lifespan that loads the model (or scans the models of
TRANSDUCE_MODELS) and runs the batcher(s)."""

from __future__ import annotations

import asyncio
import logging
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from transduce.engine.errors import ModelLoadError
from transduce.service import draining
from transduce.service.apikeys import KeyFileError, reload_keys
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorFactory, TranslatorLike
from transduce.service.errors import install_error_handlers
from transduce.service.filestore import FileStore
from transduce.service.idle import release_when_idle
from transduce.service.middleware import HeadAsGetMiddleware, JsonCORSMiddleware, RequestContextMiddleware
from transduce.service.model_metrics import ModelMetrics
from transduce.service.models import ModelLoader, ModelPool
from transduce.service.observability import Metrics
from transduce.service.pipeline import PipelineGauges, TranslationPipeline, run_canary
from transduce.service.ratelimit import RateLimiter
from transduce.service.registry import pairs_text
from transduce.service.routers import admin, detect, files, health, meta, observability, translate, web
from transduce.service.routing import RoutedPipeline
from transduce.service.state import AppState

log = logging.getLogger("transduce.service")


def load_translator(settings: Settings) -> TranslatorLike:
    """The engine over the exported model directory ``settings.model_dir``."""
    from transduce.engine.translator import Translator

    if not settings.model_dir:
        raise ValueError("no model directory: set model_dir (TRANSDUCE_MODEL_DIR) to a `transduce export` output")
    return Translator(
        settings.model_dir,
        device=settings.device,
        intra_threads=settings.intra_threads,
        strict_device=settings.strict_device,
        replicas=settings.engine_replicas,  # either scheduler: one worker per replica
        shortlist=settings.shortlist,
        shared_pool=True,  # every engine and model of the server on one thread pool
    )


def load_model_dir(path: Path, settings: Settings) -> TranslatorLike:
    """The engine over one model directory of ``settings.models``."""
    return load_translator(settings.model_copy(update={"model_dir": str(path), "models": None}))


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load the model (or scan the models) off the event loop, start the queue(s); drain on shutdown."""
    state: AppState = app.state.transduce
    serving = _serve_models(state) if state.pool is not None else _serve_model(state)
    async with serving:
        tasks = [asyncio.create_task(_purge_files(state), name="transduce-files-janitor")]
        if state.settings.idle_release_s > 0:
            tasks.append(asyncio.create_task(release_when_idle(state), name="transduce-idle-release"))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # a release under way ends before the engines stop


@asynccontextmanager
async def _serve_model(state: AppState) -> AsyncIterator[None]:
    """One model: load it, start its batcher, translate the canary; drain on shutdown."""
    settings = state.settings
    translator = await asyncio.to_thread(state.translator_factory, settings)
    pipeline = TranslationPipeline(translator, settings, state.metrics, state.window)
    await pipeline.queue.start()
    state.pipeline = pipeline
    started = time.monotonic()
    source, target, text = await run_canary(pipeline, settings)
    log.info(
        "canary %s->%s %r -> %r in %.0f ms; ready on %s",
        source,
        target,
        settings.canary_text,
        text,
        (time.monotonic() - started) * 1000,
        translator.provider,
    )
    _log_glossary(settings, translator.pairs)
    state.started, state.ready = True, not state.draining

    def on_hangup() -> None:  # a closed terminal or `systemctl reload` must not stop it
        if state.keyring.path is not None:
            sighup_keys(state)
            return
        log.warning("SIGHUP ignored: one model (model_dir) has nothing to rescan; restart to serve another")

    try:
        with _hangups(state, on_hangup):
            yield
    finally:
        await draining.stop(state)
        log.info("stopped")


@asynccontextmanager
async def _serve_models(state: AppState) -> AsyncIterator[None]:
    """Several models: scan them, load the first; SIGHUP rescans them under `transduce serve`; drain on shutdown."""
    pool, settings = state.pool, state.settings
    assert pool is not None
    await pool.start()
    log.info(
        "models in %s: %s; pairs %s; through English %s",
        settings.models,
        ", ".join(f"{n} ({e.state})" for n, e in pool.entries.items()) or "none",
        pairs_text(pool.routes.direct),
        pairs_text(pool.routes.pivots),
    )
    _log_glossary(settings, pool.routes.pairs)
    if pool.entries and all(e.state == "failed" for e in pool.entries.values()):
        state.fatal = pool.readiness()  # a server that can never serve: stop (`transduce serve` exits 1)
    state.started, state.ready = True, not state.draining
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[Any]] = set()

    async def reload() -> None:
        try:
            await pool.reload()
        except ModelLoadError as exc:  # e.g. the models directory is gone: the models loaded go on serving
            log.error("SIGHUP: models not reloaded: %s", exc)
        except Exception:  # (an unexpected fault: logged with its traceback, not "Task exception was never retrieved")
            log.exception("SIGHUP: models not reloaded")

    def on_hangup() -> None:
        if not sighup_keys(state):
            return
        task = loop.create_task(reload(), name="transduce-reload")
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    try:
        with _hangups(state, on_hangup):
            yield
    finally:
        await draining.stop(state)
        log.info("stopped")


def sighup_keys(state: AppState) -> bool:
    """SIGHUP: ``reload_keys``; False, logged, when the key file cannot be used (the keys read before stay, and, as
    at POST /admin/reload, nothing else is reloaded)."""
    try:
        reload_keys(state.keyring, state.limiter)
    except KeyFileError as exc:
        log.error("SIGHUP: nothing reloaded, the API keys read before stay: %s", exc)
        return False
    return True


@contextmanager
def _hangups(state: AppState, on_hangup: Callable[[], None]) -> Iterator[None]:
    """Under `transduce serve` (``reload_on_sighup``, the main thread's loop): SIGHUP calls ``on_hangup`` while
    serving, and is ignored after, to the end, as it was before the loop ran."""
    if not state.reload_on_sighup:
        yield
        return
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, on_hangup)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _log_glossary(settings: Settings, pairs: list[tuple[str, str]]) -> None:
    if settings.glossary:  # read (and checked) with the settings; a pair no model translates is never used
        served = {(s.lower(), t.lower()) for s, t in pairs}
        unused = sorted(f"{s}-{t}" for s, t in settings.glossary if (s, t) not in served)
        log.info(
            "glossary file %s: %d terms for %d language pairs%s",
            settings.glossary_file,
            sum(len(entries) for entries in settings.glossary.values()),
            len(settings.glossary),
            f" ({', '.join(unused)}: not translated by this model, unused)" if unused else "",
        )


async def _purge_files(state: AppState) -> None:
    """Delete expired translated files every minute (or every file_ttl_s, if shorter)."""
    while True:
        await asyncio.to_thread(state.files.purge)
        await asyncio.sleep(max(1.0, min(60.0, state.settings.file_ttl_s)))


def create_app(
    model_dir: str | Path | None = None,
    settings: Settings | None = None,
    *,
    translator_factory: TranslatorFactory | None = None,
    model_loader: ModelLoader | None = None,
    reload_on_sighup: bool = False,
) -> FastAPI:
    """The app serving the exported model in ``model_dir`` (default: ``settings.model_dir``, i.e. TRANSDUCE_MODEL_DIR),
    or the several models of ``settings.models`` (TRANSDUCE_MODELS).

    The model loads in the lifespan. ``translator_factory`` replaces loading the engine (tests and embedders pass
    their own); without it a model directory is required. With several models, ``model_loader`` replaces loading
    each directory's engine, and ``reload_on_sighup`` (``transduce serve``, on the main thread) makes SIGHUP rescan
    them, or with one model log and ignore it. ``uvicorn --factory
    transduce.service.main:create_app`` serves what TRANSDUCE_MODEL_DIR or TRANSDUCE_MODELS names."""
    settings = settings or Settings()
    if model_dir is not None:
        settings = settings.model_copy(update={"model_dir": str(model_dir)})
    if settings.models and (settings.model_dir or translator_factory is not None):
        raise ValueError(
            "create_app serves one model (model_dir, translator_factory) or several (settings.models), not both"
        )
    if translator_factory is None and not settings.model_dir and not settings.models:
        raise ValueError(
            "create_app needs a model directory: pass model_dir or set TRANSDUCE_MODEL_DIR (or TRANSDUCE_MODELS) "
            "(`transduce serve` finds the shipped model for you)"
        )
    app = FastAPIOffline(  # /docs and /redoc served from bundled assets: they work without internet access
        title="transduce",
        version="0.1.0",
        lifespan=lifespan,
        description="Machine translation: a paper Transformer served by onnxruntime with dynamic "
        "batching. LibreTranslate-compatible POST /translate.",
    )
    files_dir = Path(settings.files_dir) if settings.files_dir else Path(tempfile.gettempdir()) / "transduce-files"
    state = AppState(
        settings,
        translator_factory or load_translator,
        Metrics(),
        FileStore(
            files_dir,
            settings.file_ttl_s,
            max_bytes=settings.max_stored_bytes,
            max_files=settings.max_stored_files,
        ),
    )
    state.reload_on_sighup = reload_on_sighup
    state.limiter = RateLimiter(settings.req_limit)
    state.keyring = settings.key_ring()
    if settings.models:
        model_metrics = ModelMetrics(state.metrics.registry)
        state.pool = ModelPool(settings, state.metrics, state.window, model_metrics, model_loader or load_model_dir)
        state.pipeline = RoutedPipeline(state.pool, model_metrics)

    def gauges() -> PipelineGauges:
        return state.pipeline.gauges() if state.pipeline is not None else PipelineGauges()

    state.metrics.bind(
        lambda: float(gauges().queue_depth),
        lambda: gauges().padding_ratio,
        lambda: float(gauges().cache_entries),
        lambda: gauges().hit_ratio,
    )
    app.state.transduce = state
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware, state=state)
    app.add_middleware(HeadAsGetMiddleware)
    if settings.origins:  # added last, so it runs first: a preflight is answered before anything else
        app.add_middleware(
            JsonCORSMiddleware,
            allow_origins=settings.origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "Authorization", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Retry-After"],
            max_age=600,
        )
    for module in (translate, detect, files, meta, health, observability, web, admin):
        app.include_router(module.router)
    translate.document_request_schema(app)
    app.mount("/static", StaticFiles(directory=web.STATIC), name="static")
    return app
