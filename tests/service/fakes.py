"""A deterministic fake of engine.translator.Translator for service tests: no model, knobs to block or fail."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from asgi_lifespan import LifespanManager
from fastapi import FastAPI

from engine.errors import UnsupportedLanguageError
from engine.options import DecodeOptions
from engine.translator import TranslationResult
from service.config import Settings
from service.main import create_app

NAMES = {"en": "English", "de": "German", "fr": "French"}


def fake_translation(text: str, k: int = 0) -> str:
    """What the fake returns for one sentence: its words reversed and upper-cased; alternative k gets a "#k"."""
    best = " ".join(reversed(text.split())).upper()
    return best if k == 0 else f"{best} #{k}"


class FakeTranslator:
    """Implements what the service calls: pairs, languages, check_pair, split_sentences, count_tokens, translate."""

    model_name = "fake-model"
    provider = "CPUExecutionProvider"

    def __init__(self, pairs: Sequence[tuple[str, str]] = (("de", "en"), ("en", "de"))) -> None:
        self.pairs = list(pairs)
        self.languages = sorted({lang for pair in self.pairs for lang in pair})
        self.calls: list[list[str]] = []  # the texts of every translate call, in order
        self.options: list[DecodeOptions] = []  # the options of every translate call
        self.gate: threading.Event | None = None  # when set, translate waits for it (the worker thread blocks)
        self.entered = threading.Event()  # set when a translate call starts
        self.fail_on: dict[str, Exception] = {}  # a sentence that makes translate raise the given exception
        self.lock = threading.Lock()

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        """UnsupportedLanguageError for a pair not in ``pairs``."""
        if (source_lang, target_lang) not in self.pairs:
            raise UnsupportedLanguageError(f"language pair {source_lang}->{target_lang} is not supported")

    def split_sentences(self, text: str) -> list[tuple[str, str]]:
        """Split after ". " (or a line break), keeping the whitespace that followed each sentence."""
        text = text.lstrip()
        out: list[tuple[str, str]] = []
        sentence = ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\n" or (ch == " " and sentence.endswith(".")):
                j = i
                while j < len(text) and text[j].isspace():
                    j += 1
                out.append((sentence, text[i:j]))
                sentence, i = "", j
                continue
            sentence += ch
            i += 1
        if sentence:
            out.append((sentence, ""))
        return out

    def count_tokens(self, text: str) -> int:
        """Words plus one (an eos)."""
        return len(text.split()) + 1

    def translate(
        self, texts: list[str], *, source_lang: str, target_lang: str, options: DecodeOptions | None = None
    ) -> list[TranslationResult]:
        """Reverse and upper-case each text; ``options.num_hypotheses`` hypotheses each."""
        self.entered.set()
        if self.gate is not None and not self.gate.wait(20):
            raise RuntimeError("test gate never opened")
        options = options or DecodeOptions()
        with self.lock:
            self.calls.append(list(texts))
            self.options.append(options)
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


@asynccontextmanager
async def serve(fake: Any = None, **overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The real app (lifespan included) over ``fake``; yields an httpx client and the app."""
    fake = fake if fake is not None else FakeTranslator()
    settings = Settings(**{"max_wait_ms": 1.0, "log_json": False, **overrides})
    app = create_app(settings, translator_factory=lambda _: fake)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with LifespanManager(app), httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, app


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` on the event loop until it holds; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def wait_entered(fake: FakeTranslator) -> None:
    """Wait (off the loop) until the fake's translate was entered."""
    assert await asyncio.to_thread(fake.entered.wait, 5), "translate was never called"


def post_then_hang_up(app: FastAPI, payload: dict[str, Any]) -> tuple[asyncio.Task[None], asyncio.Event]:
    """POST /translate straight to the ASGI app (httpx cannot hang up mid-request); setting the event disconnects."""
    import json

    body = json.dumps(payload).encode()
    messages: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]
    hung_up = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        pass

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/translate", "raw_path": b"/translate", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
             "client": ("127.0.0.1", 1), "server": ("test", 80)}
    return asyncio.create_task(app(scope, receive, send)), hung_up
