"""create_app(): the FastAPI application, with a lifespan that loads the model and runs the batcher."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.config import Settings
from service.errors import install_error_handlers
from service.middleware import RequestContextMiddleware
from service.observability import Metrics
from service.pipeline import TranslationPipeline, TranslatorLike
from service.routers import health, meta, observability, translate, web
from service.state import AppState

log = logging.getLogger("transduce.service")


def load_translator(settings: Settings) -> TranslatorLike:
    """The real engine over ``settings.model_dir`` (the shipped model when unset)."""
    from engine.translator import Translator
    from transduce.models import resolve_model_dir

    return Translator(resolve_model_dir(settings.model_dir), device=settings.device,
                      intra_threads=settings.intra_threads, strict_device=settings.strict_device)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load the model off the event loop, start the batcher, translate the canary; drain on shutdown."""
    state: AppState = app.state.transduce
    settings = state.settings
    translator = await asyncio.to_thread(state.translator_factory, settings)
    pipeline = TranslationPipeline(translator, settings, state.metrics, state.window)
    await pipeline.batcher.start()
    state.pipeline = pipeline
    source, target = translator.pairs[0]
    started = time.monotonic()
    results, _ = await pipeline.translate([settings.canary_text], source=source, target=target, beam_size=1,
                                          alternatives=0, started=started)
    log.info("canary %s->%s %r -> %r in %.0f ms; ready on %s", source, target, settings.canary_text,
             results[0].text, (time.monotonic() - started) * 1000, translator.provider)
    state.ready = True
    try:
        yield
    finally:
        state.ready, state.draining = False, True
        log.info("draining: finishing accepted requests (up to %.0f s)", settings.shutdown_grace_s)
        await pipeline.batcher.stop(drain=True, timeout=settings.shutdown_grace_s)
        log.info("stopped")


def create_app(settings: Settings | None = None, *,
               translator_factory: Callable[[Settings], TranslatorLike] | None = None) -> FastAPI:
    """Build the app; ``translator_factory`` lets tests (or embedders) supply the translator."""
    settings = settings or Settings()
    app = FastAPI(title="transduce", version="0.1.0", lifespan=lifespan,
                  description="Machine translation: a paper Transformer served by onnxruntime with dynamic "
                              "batching. LibreTranslate-compatible POST /translate.")
    state = AppState(settings, translator_factory or load_translator, Metrics())
    state.metrics.bind(lambda: float(state.pipeline.batcher.queue_depth) if state.pipeline else 0.0,
                       lambda: _padding_ratio(state))
    app.state.transduce = state
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware, state=state)
    for module in (translate, meta, health, observability, web):
        app.include_router(module.router)
    translate.document_request_schema(app)
    app.mount("/static", StaticFiles(directory=web.STATIC), name="static")
    return app


def _padding_ratio(state: AppState) -> float:
    stats = getattr(state.pipeline.translator, "stats", None) if state.pipeline else None
    if stats is None or not stats.padded_source_tokens:
        return 0.0
    return 1.0 - stats.source_tokens / stats.padded_source_tokens
