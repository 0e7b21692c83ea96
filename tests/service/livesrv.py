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


@contextmanager
def live_server(translator: Any, **settings: Any) -> Iterator[str]:
    """Serve ``translator`` with ``Settings(**settings)`` on loopback until the block ends; yields the base URL."""
    port = free_port()
    app = create_app(Settings(**{"log_json": False, **settings}), translator_factory=lambda _: translator)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/ready", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    else:
        raise RuntimeError("test server did not become ready in 30 s")
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(15)
