"""The one service test harness.

- ``build_app(translator, gate=..., **settings)``: the real app (``create_app``) for a test, over a translator;
  both ways of serving it below call it, so every test sees the same settings defaults.
- ``serve(...)``: the app in-process with its lifespan, and an httpx client over ASGI (most service tests).
- ``serve_models(models, ...)``: the same for a server with several model directories (``TRANSDUCE_MODELS``).
- ``live_server(...)``: the app under a real uvicorn server on a loopback port (browser, fuzz, client library,
  load, README and CLI tests).
- ``FakeTranslator``: a deterministic stand-in for the engine's ``Translator`` that records what it was asked.
- ``Gate``: makes translate calls block until released; it wraps any translator, the fake or the real tiny one.

Import these as ``tests.service.harness``; nothing here is a fixture.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from transduce.engine.errors import UnsupportedLanguageError
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.engine.translator import Translator
from transduce.service.config import Settings
from transduce.service.engine_api import TranslatorFactory, TranslatorLike
from transduce.service.main import create_app
from transduce.service.models import ModelLoader

EN_DE = {"source": "en", "target": "de"}
# plain logs; batches form without delay; no idle release unless a test asks (tests/service/test_idle_release.py)
TEST_DEFAULTS: dict[str, Any] = {"log_json": False, "max_wait_ms": 1.0, "idle_release_s": 0}
GATE_TIMEOUT_S = 20.0  # a held translate call gives up (and fails its batch) after this long


class IsolatedSettings(Settings):
    """Settings from the test's own arguments only: a TRANSDUCE_* variable or a .env file where the tests run must
    not change what a test serves."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


# --- the fake translator -------------------------------------------------------------------------------------------


def fake_translation(text: str, k: int = 0) -> str:
    """What the fake returns for one sentence: its words reversed and upper-cased; alternative k gets a "#k"."""
    best = " ".join(reversed(text.split())).upper()
    return best if k == 0 else f"{best} #{k}"


class FakeTranslator:
    """Implements what the service calls (``transduce.service.engine_api.TranslatorLike``), deterministically."""

    model_name = "fake-model"
    provider = "CPUExecutionProvider"

    def __init__(
        self, pairs: Sequence[tuple[str, str]] = (("de", "en"), ("en", "de")), *, max_source_tokens: int = 10_000
    ) -> None:
        self.pairs = list(pairs)
        self.max_source_tokens = max_source_tokens
        self.calls: list[list[str]] = []  # the texts of every translate call, in order ([0] is the start-up canary)
        self.options: list[DecodeOptions] = []  # the options of every translate call
        self.langs: list[tuple[str, str]] = []  # the (source, target) of every translate call
        self.fail_on: dict[str, Exception] = {}  # a sentence that makes translate raise the given exception
        self._lock = threading.Lock()

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        """UnsupportedLanguageError for a pair not in ``pairs``."""
        if (source_lang, target_lang) not in self.pairs:
            raise UnsupportedLanguageError(f"language pair {source_lang}->{target_lang} is not supported")

    def count_tokens(self, text: str) -> int:
        """Words plus one (an eos)."""
        return len(text.split()) + 1

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        """Reverse and upper-case each text; ``options.num_hypotheses`` hypotheses each."""
        with self._lock:
            self.calls.append(list(texts))
            self.options.append(options)
            self.langs.append((source_lang, target_lang))
        for text in texts:
            if text in self.fail_on:
                raise self.fail_on[text]
        return [
            TranslationResult(
                hypotheses=[fake_translation(t, k) for k in range(options.num_hypotheses)],
                tokens=[[1] * len(t.split()) for _ in range(options.num_hypotheses)],
            )
            for t in texts
        ]

    @property
    def translated(self) -> list[str]:
        """Every sentence translated so far, flattened."""
        return [t for call in self.calls for t in call]


# --- the gate ------------------------------------------------------------------------------------------------------


class Gate:
    """Holds the translate calls of the translators it guards until released.

    Open when made, so the start-up canary passes; ``hold()`` closes it, ``release()`` opens it again. What waits is
    the batcher's worker thread, so the event loop goes on serving (and queueing) while a call is held."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self.entered = threading.Event()  # a translate call reached the gate since the last hold()

    def hold(self) -> None:
        """Make the next translate calls wait until ``release()``."""
        self.entered.clear()
        self._open.clear()

    def release(self) -> None:
        """Let every waiting and later translate call through."""
        self._open.set()

    def pass_through(self) -> None:
        """Called by a guarded translate (in the worker thread): wait while the gate is held."""
        self.entered.set()
        if not self._open.wait(GATE_TIMEOUT_S):
            raise RuntimeError("test gate never opened")

    async def wait_entered(self, timeout_s: float = 5.0) -> None:
        """Wait (off the event loop) until a translate call reached the gate."""
        assert await asyncio.to_thread(self.entered.wait, timeout_s), "translate was never called"

    def guard(self, translator: TranslatorLike) -> GatedTranslator:
        """``translator`` with its translate calls passing through this gate."""
        return GatedTranslator(translator, self)


class DelegatingTranslator:
    """A translator that is the wrapped one in every respect; subclasses change ``translate``."""

    def __init__(self, inner: TranslatorLike) -> None:
        self.inner = inner

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return self.inner.pairs

    @property
    def max_source_tokens(self) -> int:
        return self.inner.max_source_tokens

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        self.inner.check_pair(source_lang, target_lang)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        return self.inner.translate(texts, source_lang=source_lang, target_lang=target_lang, options=options)

    def __getattr__(self, name: str) -> Any:  # e.g. the engine's ``stats``, read for the padding-ratio metric
        return getattr(self.inner, name)


class GatedTranslator(DelegatingTranslator):
    """A translator whose translate calls pass through a ``Gate`` first; everything else is the wrapped one's."""

    def __init__(self, inner: TranslatorLike, gate: Gate) -> None:
        super().__init__(inner)
        self.gate = gate

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = DEFAULT_OPTIONS
    ) -> list[TranslationResult]:
        self.gate.pass_through()
        return super().translate(texts, source_lang=source_lang, target_lang=target_lang, options=options)


# --- building and serving the app ----------------------------------------------------------------------------------


def build_app(
    translator: TranslatorLike | None = None,
    *,
    factory: TranslatorFactory | None = None,
    gate: Gate | None = None,
    **settings: Any,
) -> FastAPI:
    """The app over ``translator`` (default: a new ``FakeTranslator``), or over what ``factory`` loads in the
    lifespan; translate calls pass through ``gate`` when one is given. ``settings`` override ``TEST_DEFAULTS``."""
    if factory is not None and translator is not None:
        raise TypeError("pass a translator or a factory, not both")
    fixed = translator if translator is not None else FakeTranslator()

    def load(s: Settings) -> TranslatorLike:
        loaded = factory(s) if factory is not None else fixed
        return gate.guard(loaded) if gate is not None else loaded

    # the production scheduler (step) needs the engine's own Translator; fakes, gated translators and factories
    # run with request-level batching unless a test asks otherwise
    scheduler = "step" if isinstance(translator, Translator) and gate is None else "static"
    merged = {**TEST_DEFAULTS, "scheduler": scheduler, **settings}
    return create_app(settings=IsolatedSettings(**merged), translator_factory=load)


@asynccontextmanager
async def serve(
    translator: TranslatorLike | None = None, *, gate: Gate | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """``build_app(...)`` in-process, lifespan included (model loaded, canary done); yields an httpx client and the
    app. Unexpected app errors come back as 500 responses, as a server would send them."""
    app = build_app(translator, gate=gate, **settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        LifespanManager(app, startup_timeout=30, shutdown_timeout=30),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        try:
            yield client, app
        finally:
            if gate is not None:
                gate.release()  # a failed test must not leave the worker held while the app drains


def build_models_app(
    models: str | Path | Sequence[Path], *, loader: ModelLoader | None = None, **settings: Any
) -> FastAPI:
    """The app over several model directories (a directory of them, or a list), each loaded by ``loader`` (default:
    the engine, on one CPU thread). ``settings`` override ``TEST_DEFAULTS``."""
    value = str(models) if isinstance(models, str | Path) else ",".join(str(p) for p in models)
    merged = {**TEST_DEFAULTS, "device": "cpu", "intra_threads": 1, **settings, "models": value}
    return create_app(settings=IsolatedSettings(**merged), model_loader=loader)


@asynccontextmanager
async def serve_models(
    models: str | Path | Sequence[Path], *, loader: ModelLoader | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """``build_models_app(...)`` in-process, lifespan included (models scanned, the first one loaded)."""
    app = build_models_app(models, loader=loader, **settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        LifespanManager(app, startup_timeout=60, shutdown_timeout=30),
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
    ):
        yield client, app


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout_s: float = 30.0, headers: dict[str, str] | None = None) -> None:
    """Poll GET /health/ready until it answers 200; RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/ready", timeout=1, headers=headers).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become ready in {timeout_s:.0f} s")


@contextmanager
def live_server(
    translator: TranslatorLike, *, gate: Gate | None = None, sub_path: str = "", **settings: Any
) -> Iterator[str]:
    """``build_app(...)`` under uvicorn on a free loopback port, in a thread, until the block ends; yields the URL.

    ``sub_path`` ("/mt"): served only under it, as behind a proxy that strips it from the requests it passes on to
    `transduce serve --root-path /mt` (uvicorn then routes ``/mt/x`` with root_path ``/mt``); the URL ends in it."""
    app: Any = build_app(translator, gate=gate, **settings)
    if sub_path:
        app = _under(sub_path, app)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}{sub_path}"
    keys = app.state.transduce.settings.keys if not sub_path else frozenset()
    try:
        wait_ready(url, headers={"Authorization": f"Bearer {min(keys)}"} if keys else None)  # (PROTECT_HEALTH)
        yield url
    finally:
        if gate is not None:
            gate.release()
        server.should_exit = True
        thread.join(15)


def _under(prefix: str, app: ASGIApp) -> ASGIApp:
    """``app`` reached only under ``prefix``, with the scope uvicorn makes behind a proxy that strips it."""

    async def under(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and not (path == prefix or path.startswith(prefix + "/")):
            await PlainTextResponse("the proxy serves nothing here", status_code=404)(scope, receive, send)
            return
        await app({**scope, "root_path": prefix} if scope["type"] == "http" else scope, receive, send)

    return under


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in the Prometheus text (0 when absent)."""
    inside = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(
        rf"^{name}{{{re.escape(inside)}}} ([0-9.e+-]+)$" if labels else rf"^{name} ([0-9.e+-]+)$", text, re.M
    )
    return float(found.group(1)) if found else 0.0


# --- waiting and hanging up ----------------------------------------------------------------------------------------


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` on the event loop until it holds; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def post_then_hang_up(app: FastAPI, payload: dict[str, Any]) -> tuple[asyncio.Task[None], asyncio.Event]:
    """POST /translate straight to the ASGI app (httpx cannot hang up mid-request); setting the event disconnects."""
    messages: list[Message] = [{"type": "http.request", "body": json.dumps(payload).encode(), "more_body": False}]
    hung_up = asyncio.Event()

    async def receive() -> Message:
        if messages:
            return messages.pop(0)
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/translate",
        "raw_path": b"/translate",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    return asyncio.create_task(app(scope, receive, send)), hung_up
