"""What the app holds between requests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from transduce.service.apikeys import KeyRing
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorFactory
from transduce.service.filestore import FileStore
from transduce.service.models import ModelPool
from transduce.service.observability import LatencyWindow, Metrics
from transduce.service.pipeline import PipelineLike
from transduce.service.ratelimit import RateLimiter


@dataclass
class AppState:
    """Settings, the translator factory, metrics and (after start-up) the pipeline: one model's
    ``TranslationPipeline``, or with several models (``pool``) the ``RoutedPipeline`` over them."""

    settings: Settings
    translator_factory: TranslatorFactory
    metrics: Metrics
    files: FileStore
    window: LatencyWindow = field(default_factory=LatencyWindow)
    pipeline: PipelineLike | None = None
    pool: ModelPool | None = None
    reload_on_sighup: bool = False  # `transduce serve`: SIGHUP rescans several models (one: logged and ignored)
    started: bool = False  # the lifespan's start-up has ended (ready unless draining)
    ready: bool = False
    draining: bool = False
    # draining (transduce.service.draining): when it began, the grace's end, the queues' stop
    drain_started: float = 0.0
    cut_off: asyncio.TimerHandle | None = None
    stop_task: asyncio.Future[None] | None = None
    fatal: str | None = None  # start-up found nothing to serve (every model failed): `transduce serve` exits with it
    limiter: RateLimiter = field(default_factory=lambda: RateLimiter(0))  # req_limit per client
    keyring: KeyRing = field(default_factory=lambda: KeyRing(()))  # the API keys accepted now
    file_jobs: int = 0  # POST /translate_file uploads being parsed or translated now (max_file_jobs)
    # translate, file and detect requests (transduce.service.idle): in work now, and when the last that did work
    # (answered, failed or abandoned by the client, not refused with a 4xx) ended
    translating: int = 0
    last_translation: float = 0.0
