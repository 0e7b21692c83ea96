"""Service fixtures: apps over the tiny exported model, plus a wrapper translator that can block and count calls."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from engine.translator import Translator
from service.config import Settings
from service.main import create_app


class GatedTranslator:
    """Delegates to the real tiny translator; records every translate call and can hold it on a gate."""

    def __init__(self, real: Translator, gate: threading.Event | None = None) -> None:
        self.real, self.gate = real, gate
        self.calls: list[list[str]] = []
        self.entered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def translate(self, texts: list[str], **kwargs: Any) -> Any:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(20), "test gate never opened"
        self.calls.append(list(texts))
        return self.real.translate(texts, **kwargs)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_client(tiny_translator: Translator) -> Callable[..., Any]:
    """make_client(translator=None, **settings) -> async context manager yielding an httpx client over the app."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def factory(translator: Any = None, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
        settings = Settings(**{"max_wait_ms": 2.0, "log_json": False, **overrides})
        app: FastAPI = create_app(settings, translator_factory=lambda _: translator or tiny_translator)
        async with LifespanManager(app), httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                                           base_url="http://test") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client

    return factory


@pytest.fixture
def make_gated(tiny_translator: Translator) -> Callable[..., GatedTranslator]:
    """make_gated(gate=None) -> a GatedTranslator over the tiny model."""
    return lambda gate=None: GatedTranslator(tiny_translator, gate)
