"""What the app holds between requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorFactory
from transduce.service.filestore import FileStore
from transduce.service.observability import LatencyWindow, Metrics
from transduce.service.pipeline import TranslationPipeline


@dataclass
class AppState:
    """Settings, the translator factory, metrics and (after start-up) the pipeline."""

    settings: Settings
    translator_factory: TranslatorFactory
    metrics: Metrics
    files: FileStore
    window: LatencyWindow = field(default_factory=LatencyWindow)
    pipeline: TranslationPipeline | None = None
    ready: bool = False
    draining: bool = False
