"""What the app holds between requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from service.config import Settings
from service.observability import LatencyWindow, Metrics
from service.pipeline import TranslationPipeline, TranslatorLike


@dataclass
class AppState:
    """Settings, the translator factory, metrics and (after start-up) the pipeline."""

    settings: Settings
    translator_factory: Callable[[Settings], TranslatorLike]
    metrics: Metrics
    window: LatencyWindow = field(default_factory=LatencyWindow)
    pipeline: TranslationPipeline | None = None
    ready: bool = False
    draining: bool = False
    startup_error: str | None = None
