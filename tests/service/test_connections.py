"""Connection limits of `transduce serve` over real sockets: idle and silent connections are closed, slow bodies get
408, the connection cap makes room by closing idle connections or refuses with 503; repeated resource errors are
logged once per interval.

The servers here run the app under `transduce serve`'s own uvicorn configuration (``serve_cli.server_config``) on a
socket bound by ``serve_cli.bind_socket``, in a thread, with httptools (what serve runs on) and with h11 (uvicorn's
fallback where httptools is not installed); one test runs the `transduce serve` process itself."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
import uvicorn

from tests.service.harness import FakeTranslator, Gate, build_app, free_port, wait_ready
from transduce.serve_cli import bind_socket, server_config
from transduce.service.connections import MAX_HEADER_BYTES, ConnectionGuard, GuardedConnection, guarded_protocol
from transduce.service.engine_api import TranslatorLike
from transduce.service.logging import LogThrottle

CLOSE_WAIT_S = 10.0  # generous: the machine may be busy; a connection left open fails the test after this long


class Served(NamedTuple):
    url: str
    port: int
    connections: ConnectionGuard


# uvicorn's HTTP parsers: httptools (a dependency, what serve runs on) and h11 (pure Python, uvicorn's fallback)
PARSERS = ["httptools", "h11"]


@contextmanager
def serving(
    translator: TranslatorLike, *, gate: Gate | None = None, parser: str = "httptools", **settings: Any
) -> Iterator[Served]:
    """The app under serve's uvicorn configuration on a free loopback port (``parser``: h11 instead of httptools)."""
    app = build_app(translator, gate=gate, **settings)
    sock = bind_socket("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    config = server_config(app, app.state.transduce.settings)
    assert isinstance(config.http, type) and issubclass(config.http, GuardedConnection)
    if parser == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        config.http = guarded_protocol(config.http.connections.limits, H11Protocol)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url)
        yield Served(url, port, config.http.connections)
    finally:
        if gate is not None:
            gate.release()
        server.should_exit = True
        thread.join(15)
        sock.close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=CLOSE_WAIT_S)


def read_until_closed(conn: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took; fails if it never does."""
    started, data = time.monotonic(), b""
    with conn:
        while True:
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                pytest.fail(f"connection still open after {CLOSE_WAIT_S} s; got {data[:80]!r}")
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    return data, time.monotonic() - started


def read_response(conn: socket.socket) -> bytes:
    """One whole HTTP response (headers and a Content-Length body) from ``conn``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.lower().split(b"\r\n") if line.startswith(b"content-length"))
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, f"closed mid-body: {data!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def is_open(conn: socket.socket) -> bool:
    """True while the server has not closed ``conn`` (nothing to read, no EOF)."""
    conn.setblocking(False)
    try:
        return conn.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except ConnectionError:
        return False
    finally:
        conn.setblocking(True)


GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"


@pytest.mark.parametrize("parser", PARSERS)
def test_idle_keep_alive_and_silent_connections_are_closed(parser: str) -> None:
    with serving(FakeTranslator(), parser=parser, keep_alive_timeout_s=1, request_read_timeout_s=0.5) as (_, port, _):
        silent = connect(port)  # opens and never sends a byte
        partial = connect(port)
        partial.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n")  # headers never finished
        kept = connect(port)
        kept.sendall(GET_HEALTH)  # one request answered, then idle on a kept-alive connection
        for conn in (silent, partial):
            data, waited = read_until_closed(conn)
            assert data == b"" and waited < CLOSE_WAIT_S
        data, _ = read_until_closed(kept)
        assert data.startswith(b"HTTP/1.1 200 ") and data.count(b"HTTP/1.1") == 1


def test_a_connection_sending_requests_in_time_stays_open() -> None:
    with (
        serving(FakeTranslator(), keep_alive_timeout_s=2, request_read_timeout_s=1) as (_, port, _),
        connect(port) as c,
    ):
        for _ in range(4):  # 4 requests over ~2.4 s: longer than either timeout, each gap shorter than both
            time.sleep(0.6)
            c.sendall(GET_HEALTH)
            assert read_response(c).startswith(b"HTTP/1.1 200 ")
        assert is_open(c)


@pytest.mark.parametrize("parser", PARSERS)
def test_a_body_that_never_arrives_is_408(parser: str) -> None:
    with serving(FakeTranslator(), parser=parser, request_read_timeout_s=0.5) as (_, port, _):
        conn = connect(port)
        conn.sendall(
            b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"q": "stalled'
        )
        data, _ = read_until_closed(conn)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert data.endswith(b'{"error":"request body not received within 0.5 s (request_read_timeout_s)"}')


@pytest.mark.parametrize("parser", PARSERS)
def test_at_the_cap_the_oldest_idle_connection_makes_room(parser: str) -> None:
    with serving(FakeTranslator(), parser=parser, max_connections=3) as (url, port, _):
        served = connect(port)
        served.sendall(GET_HEALTH)
        assert read_response(served).startswith(b"HTTP/1.1 200 ")
        idle = [connect(port), connect(port)]  # connected, nothing sent yet: the cap of 3 is reached
        time.sleep(0.2)
        r = httpx.get(f"{url}/health", headers={"Connection": "close"})  # a real client still gets through
        assert r.status_code == 200
        data, _ = read_until_closed(idle[0])  # the oldest that never sent a request went first
        assert data == b""
        assert is_open(served) and is_open(idle[1])
        for conn in (served, idle[1]):
            conn.close()


@pytest.mark.parametrize("parser", PARSERS)
def test_when_every_connection_is_busy_a_new_one_gets_503(parser: str) -> None:
    fake, gate = FakeTranslator(), Gate()
    body = b'{"q": "held", "source": "en", "target": "de"}'
    request = (
        b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    with serving(fake, gate=gate, parser=parser, max_connections=2) as (_, port, connections):
        gate.hold()
        busy = [connect(port), connect(port)]
        for conn in busy:
            conn.sendall(request)
        deadline = time.monotonic() + CLOSE_WAIT_S
        while connections.busy < 2:  # both requests read, both held by the gate
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused, _ = read_until_closed(connect(port))
        assert refused.startswith(b"HTTP/1.1 503 ") and b"max_connections" in refused
        assert b"retry-after: 1" in refused.lower()
        gate.release()
        for conn in busy:
            with conn:
                assert read_response(conn).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("parser", PARSERS)
def test_oversized_headers_get_431_and_the_connection_is_closed(parser: str) -> None:
    """A flood of headers is cut off at MAX_HEADER_BYTES (httptools alone would buffer them without a limit), while
    ordinary headers and a large body sent in the same packets as its headers pass."""
    pad = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    body = json.dumps({"q": "Hello", "source": "en", "target": "de", "pad": "x" * 200_000}).encode()
    post = (
        b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    with serving(FakeTranslator(), parser=parser) as (_, port, _):
        flood = connect(port)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed while we still send: read on
            flood.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n" + pad * (MAX_HEADER_BYTES // len(pad) + 50))
        data, _ = read_until_closed(flood)
        if parser == "httptools":  # h11 refuses over its own 16 KiB limit first, with uvicorn's plain 400
            assert data.startswith(b"HTTP/1.1 431 ")
            assert data.endswith(b'{"error": "request headers larger than 64 KiB"}')
        else:
            assert data.startswith(b"HTTP/1.1 4")
        with connect(port) as ok:
            ok.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n" + pad * 12 + b"\r\n")
            assert read_response(ok).startswith(b"HTTP/1.1 200 ")
            ok.sendall(post)  # 200 KB of body right behind the headers: not header bytes
            assert read_response(ok).startswith(b"HTTP/1.1 200 ")


def test_headers_over_the_limit_that_end_in_a_later_read_or_a_long_url_get_431() -> None:
    """Headers are counted before the parser reads them, so a header block over MAX_HEADER_BYTES whose end comes in
    the read that crosses the limit is refused too (it was parsed whole and answered 200), and so is a request
    line over the limit (httptools' own error for it was answered as a malformed request)."""
    big = b"X-Big: " + b"a" * 100_000 + b"\r\n"
    url = b"/health?" + b"a" * (MAX_HEADER_BYTES + 5000)
    with serving(FakeTranslator(), parser="httptools") as (_, port, _):
        for first, rest in (
            (b"GET /health HTTP/1.1\r\nHost: test\r\n" + big[:60_000], big[60_000:] + b"\r\n"),
            (b"GET " + url[:60_000], url[60_000:] + b" HTTP/1.1\r\nHost: test\r\n\r\n"),
        ):
            conn = connect(port)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.sendall(first)
                time.sleep(0.2)  # read apart: the end of the headers comes in the read after the first 60 KB
                conn.sendall(rest)
            data, _ = read_until_closed(conn)
            assert data.startswith(b"HTTP/1.1 431 "), data[:200]
        with connect(port) as ok:  # a blank line split between two reads ends the headers all the same
            ok.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n\r")
            time.sleep(0.2)
            ok.sendall(b"\n")
            assert read_response(ok).startswith(b"HTTP/1.1 200 ")


def test_headers_with_bare_line_feeds_and_a_crlf_blank_line_end_there() -> None:
    """h11 reads LF line ends, and a CRLF blank line after them, as the end of the headers: so does the header count,
    else the body behind them is counted as headers (a 431 for a legal request)."""
    body = json.dumps({"q": "Hello", "source": "en", "target": "de", "pad": "x" * 200_000}).encode()
    head = b"POST /translate HTTP/1.1\nHost: test\nContent-Type: application/json\nContent-Length: %d\n\r\n" % len(body)
    with serving(FakeTranslator(), parser="h11") as (_, port, _), connect(port) as conn:
        conn.sendall(head + body)
        assert read_response(conn).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("parser", PARSERS)
def test_bytes_that_are_not_http_get_a_json_400(parser: str) -> None:
    """uvicorn answers a request it cannot parse with a text/plain 400; clients get the API's error shape."""
    with serving(FakeTranslator(), parser=parser) as (_, port, _):
        for junk in (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40),
            b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        ):
            with connect(port) as conn:  # a TLS hello sent to the plain port; a header line without a colon
                conn.sendall(junk)
                data, _ = read_until_closed(conn)
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower()
            assert json.loads(body) == {
                "error": "malformed HTTP request: the request line or headers are not HTTP/1.1; nothing was read"
            }
        with connect(port) as ok:  # the server goes on serving
            ok.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n")
            assert read_response(ok).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("parser", PARSERS)
def test_the_rest_of_a_body_answered_early_is_not_counted_as_headers(parser: str) -> None:
    """A body over max_body_bytes is answered 413 before it is all sent; what the client still sends is body, not
    the next request's headers: no second, unasked-for 431."""
    head = (
        b"POST /translate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n"
    )
    with serving(FakeTranslator(), parser=parser, max_body_bytes=1000, request_read_timeout_s=1) as (_, port, _):
        conn = connect(port)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(head + b"x" * 2000)
            time.sleep(0.2)  # the 413 is on its way
            for _ in range(10):
                conn.sendall(b"x" * 20_000)
        data, _ = read_until_closed(conn)
    assert data.startswith(b"HTTP/1.1 413 ") and data.count(b"HTTP/1.1 ") == 1, data[:300]


def test_serve_runs_on_uvloop_and_httptools() -> None:
    """serve leaves uvicorn its automatic choices, which pick the C event loop and HTTP parser transduce depends on
    (about a fifth less event-loop CPU per request than asyncio's loop and h11: README, Benchmarks)."""
    import uvloop
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    app = build_app(FakeTranslator())
    config = server_config(app, app.state.transduce.settings)
    config.load()
    factory = config.get_loop_factory()
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
        # what serve runs for each connection: our guard around httptools' protocol
        protocol: Any = config.http_protocol_class  # typed as asyncio.Protocol; uvicorn passes these
        conn = protocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        assert isinstance(conn, GuardedConnection) and isinstance(conn.inner, HttpToolsProtocol)
    finally:
        loop.close()


def test_transduce_serve_closes_silent_connections(tiny_model_dir: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "TRANSDUCE_MODEL_DIR": str(tiny_model_dir),
        "TRANSDUCE_PORT": str(port),
        "TRANSDUCE_REQUEST_READ_TIMEOUT_S": "0.5",
        "TRANSDUCE_MAX_CONNECTIONS": "8",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "transduce", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout_s=60)
        silent = [connect(port) for _ in range(12)]  # more than the cap: the oldest are closed at once
        for conn in silent:
            data, _ = read_until_closed(conn)
            assert data == b""
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"Traceback" not in err


# --- logging -------------------------------------------------------------------------------------------------------


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_resource_errors_are_logged_once_per_interval_as_one_line() -> None:
    now = [0.0]
    handler = Collect()
    handler.addFilter(LogThrottle(10.0, clock=lambda: now[0]))
    logger = logging.getLogger("asyncio")
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers[:], logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    loop = asyncio.new_event_loop()
    try:
        emfile = OSError(errno.EMFILE, "Too many open files")
        for _ in range(1000):  # what asyncio itself does on every failed accept()
            loop.call_exception_handler({"message": "socket.accept() out of system resource", "exception": emfile})
        assert handler.lines == [
            "socket.accept() out of system resource: OSError: [Errno 24] Too many open files "
            "(repeats are logged at most once per 10 s)"
        ]
        now[0] = 9.9
        loop.call_exception_handler({"message": "socket.accept() out of system resource", "exception": emfile})
        now[0] = 10.1
        loop.call_exception_handler({"message": "socket.accept() out of system resource", "exception": emfile})
        assert len(handler.lines) == 2
        assert handler.lines[1].endswith("(1000 more like it not logged in the last 10 s)")
        for _ in range(3):  # anything else passes untouched, traceback included
            loop.call_exception_handler({"message": "something else", "exception": ValueError("boom")})
        assert handler.lines[2:] == ["something else\nValueError: boom"] * 3
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addHandler(handler)
        try:
            for _ in range(50):  # what uvicorn logs for each malformed request
                uvicorn_log.warning("Invalid HTTP request received.")
        finally:
            uvicorn_log.removeHandler(handler)
        assert handler.lines[5:] == ["Invalid HTTP request received. (repeats are logged at most once per 10 s)"]
        multipart_log = logging.getLogger("python_multipart.multipart")
        multipart_log.addHandler(handler)
        try:
            for i in range(40):  # the multipart parser warns for each malformed body, each time in other words
                multipart_log.warning("Expected boundary character 45, got 123 at index %d", i)
        finally:
            multipart_log.removeHandler(handler)
        assert handler.lines[6:] == [
            "Expected boundary character 45, got 123 at index 0 (repeats are logged at most once per 10 s)"
        ]
    finally:
        loop.close()
        logger.handlers[:], logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])


def test_configure_logging_installs_the_throttle() -> None:
    from transduce.service.logging import configure_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging(json_lines=True, throttle_s=3.0)
        throttles = [f for f in root.handlers[0].filters if isinstance(f, LogThrottle)]
        assert [t.interval_s for t in throttles] == [3.0]
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])


def test_fd_headroom_raises_the_soft_limit_or_lowers_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    resource = pytest.importorskip("resource")
    from transduce.service import connections

    limits = {"soft": 256, "hard": 512}

    def getrlimit(_: int) -> tuple[int, int]:
        return limits["soft"], limits["hard"]

    def setrlimit(_: int, value: tuple[int, int]) -> None:
        limits["soft"] = value[0]

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    assert connections.fd_headroom(300) == 300 and limits["soft"] == 300 + connections.RESERVED_FDS
    assert connections.fd_headroom(1000) == 512 - connections.RESERVED_FDS and limits["soft"] == 512


def test_responses_are_not_held_back_by_nagles_algorithm() -> None:
    """Accepted connections have TCP_NODELAY: asyncio sets it only when the listening socket says it is TCP
    (IPPROTO_TCP), and without it a kept-alive client waited ~40 ms per response for its own delayed ACK."""
    with serving(FakeTranslator()) as served, connect(served.port) as conn:
        conn.sendall(GET_HEALTH)
        assert read_response(conn).startswith(b"HTTP/1.1 200")
        (guarded,) = list(served.connections._open)
        assert guarded.transport is not None
        server_side = guarded.transport.get_extra_info("socket")
        assert server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
