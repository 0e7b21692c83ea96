"""A real uvicorn server on a free loopback port, in a thread (shared by the browser, fuzz and load tests)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from service.config import Settings
from service.main import create_app


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, timeout_s: float = 30.0) -> None:
    """Poll GET /health/ready until it answers 200; RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become ready in {timeout_s:.0f} s")


@contextmanager
def live_server(translator: Any, **settings: Any) -> Iterator[str]:
    """Serve ``translator`` with ``Settings(**settings)`` on loopback until the block ends; yields the base URL."""
    port = free_port()
    app = create_app(Settings(**{"log_json": False, **settings}), translator_factory=lambda _: translator)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_ready(url)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(15)
