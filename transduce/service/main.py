"""create_app(model_dir): the FastAPI application, with a lifespan that loads the model and runs the batcher."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorFactory, TranslatorLike
from transduce.service.errors import install_error_handlers
from transduce.service.filestore import FileStore
from transduce.service.middleware import RequestContextMiddleware
from transduce.service.observability import Metrics
from transduce.service.pipeline import TranslationPipeline
from transduce.service.routers import detect, files, health, meta, observability, translate, web
from transduce.service.schemas import TranslateRequest
from transduce.service.state import AppState
from transduce.service.validation import validate_request

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
    )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load the model off the event loop, start the batcher, translate the canary; drain on shutdown."""
    state: AppState = app.state.transduce
    settings = state.settings
    translator = await asyncio.to_thread(state.translator_factory, settings)
    pipeline = TranslationPipeline(translator, settings, state.metrics, state.window)
    await pipeline.queue.start()
    state.pipeline = pipeline
    source, target = translator.pairs[0]
    canary = TranslateRequest(q=settings.canary_text, source=source, target=target, beam_size=1)
    started = time.monotonic()
    results, _ = await pipeline.translate(validate_request(canary, settings, translator), started=started)
    log.info(
        "canary %s->%s %r -> %r in %.0f ms; ready on %s",
        source,
        target,
        settings.canary_text,
        results[0].text,
        (time.monotonic() - started) * 1000,
        translator.provider,
    )
    if settings.glossary:  # read (and checked) with the settings; a pair the model lacks is never used
        unused = sorted(f"{s}-{t}" for s, t in settings.glossary if (s, t) not in translator.pairs)
        log.info(
            "glossary file %s: %d terms for %d language pairs%s",
            settings.glossary_file,
            sum(len(entries) for entries in settings.glossary.values()),
            len(settings.glossary),
            f" ({', '.join(unused)}: not translated by this model, unused)" if unused else "",
        )
    state.ready = True
    janitor = asyncio.create_task(_purge_files(state), name="transduce-files-janitor")
    try:
        yield
    finally:
        janitor.cancel()
        state.ready, state.draining = False, True
        log.info("draining: finishing accepted requests (up to %.0f s)", settings.shutdown_grace_s)
        await pipeline.queue.stop(drain=True, timeout=settings.shutdown_grace_s)
        log.info("stopped")


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
) -> FastAPI:
    """The app serving the exported model in ``model_dir`` (default: ``settings.model_dir``, i.e. TRANSDUCE_MODEL_DIR).

    The model loads in the lifespan. ``translator_factory`` replaces loading the engine (tests and embedders pass
    their own); without it a model directory is required. ``uvicorn --factory transduce.service.main:create_app``
    serves the directory named by TRANSDUCE_MODEL_DIR."""
    settings = settings or Settings()
    if model_dir is not None:
        settings = settings.model_copy(update={"model_dir": str(model_dir)})
    if translator_factory is None and not settings.model_dir:
        raise ValueError(
            "create_app needs a model directory: pass model_dir or set TRANSDUCE_MODEL_DIR "
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
        settings, translator_factory or load_translator, Metrics(), FileStore(files_dir, settings.file_ttl_s)
    )
    state.metrics.bind(
        lambda: float(state.pipeline.queue.queue_depth) if state.pipeline else 0.0,
        lambda: _padding_ratio(state),
        lambda: float(len(state.pipeline.cache)) if state.pipeline else 0.0,
        lambda: state.pipeline.cache.stats.hit_ratio if state.pipeline else 0.0,
    )
    app.state.transduce = state
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware, state=state)
    if settings.origins:  # added last, so it runs first: a preflight is answered before anything else
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "Authorization", "X-Request-ID"],
            expose_headers=["X-Request-ID", "Retry-After"],
            max_age=600,
        )
    for module in (translate, detect, files, meta, health, observability, web):
        app.include_router(module.router)
    translate.document_request_schema(app)
    app.mount("/static", StaticFiles(directory=web.STATIC), name="static")
    return app


def _padding_ratio(state: AppState) -> float:
    stats = getattr(state.pipeline.translator, "stats", None) if state.pipeline else None
    if stats is None or not stats.padded_source_tokens:
        return 0.0
    return 1.0 - stats.source_tokens / stats.padded_source_tokens
