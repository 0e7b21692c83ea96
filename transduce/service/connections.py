"""Connection limits for `transduce serve`: a cap on open connections and a deadline for a request's headers.

uvicorn closes idle keep-alive connections itself (``timeout_keep_alive``), but it keeps a connection that never
sends a complete request for ever, and it accepts connections until the process runs out of file descriptors (then
every request times out). ``guarded_protocol`` wraps uvicorn's HTTP protocol, one instance per connection:

- a connection must deliver a request's headers within ``request_read_timeout_s`` of opening (or, on a kept-alive
  connection, of the first byte of its next request); otherwise it is closed;
- a request's headers may take at most ``MAX_HEADER_BYTES``; a connection sending more is answered 431 and closed
  (httptools, uvicorn's C parser, buffers headers without a limit: one connection could fill the memory);
- at most ``max_connections`` are open: a new connection over the cap closes the oldest idle one (no request in
  progress; one that never sent a request goes first), or, when every open connection is busy, is answered 503 and
  closed at once.

``fd_headroom`` makes room for the cap in the process's file-descriptor limit, or lowers the cap to fit it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, cast

log = logging.getLogger("transduce.service")
RESERVED_FDS = 64  # descriptors kept for everything but client connections: model files, logs, the listener, ...
MAX_HEADER_BYTES = 64 * 1024  # a request line and headers (nginx allows 4 x 8 KiB, h11 16 KiB by default)


def _response(status: str, message: str, *extra: str) -> bytes:
    """A complete HTTP/1.1 error response with a ``{"error": ...}`` body that closes the connection."""
    body = json.dumps({"error": message}).encode()
    head = [f"HTTP/1.1 {status}", "content-type: application/json", *extra, "connection: close"]
    return ("\r\n".join([*head, f"content-length: {len(body)}", "", ""])).encode() + body


HEADERS_TOO_LARGE = _response(
    "431 Request Header Fields Too Large", f"request headers larger than {MAX_HEADER_BYTES // 1024} KiB"
)
MALFORMED = _response(
    "400 Bad Request", "malformed HTTP request: the request line or headers are not HTTP/1.1; nothing was read"
)
REFUSAL = _response(
    "503 Service Unavailable",
    "server busy: every connection (max_connections) is in use, retry later",
    "retry-after: 1",
)


@dataclass(frozen=True)
class ConnectionLimits:
    """What the guard enforces (from the settings of the same names)."""

    max_connections: int
    request_read_timeout_s: float


class ConnectionGuard:
    """The open connections of one server, oldest first; admits each new one within ``max_connections``."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._open: dict[GuardedConnection, None] = {}  # insertion order: oldest first

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: GuardedConnection) -> bool:
        """Register ``conn``; at the cap, close an idle connection to make room. False: all busy, refuse it."""
        if len(self._open) >= self.limits.max_connections:
            victim = self._idle_victim()
            if victim is None:
                log.warning(
                    "refused a connection: all %d connections busy (max_connections)",
                    len(self._open),
                    extra={"throttle": "connections-refused"},
                )
                return False
            log.warning(
                "connection limit reached (%d, max_connections): closing idle connections to make room",
                self.limits.max_connections,
                extra={"throttle": "connections-evicted"},
            )
            self.forget(victim)
            victim.close()
        self._open[conn] = None
        return True

    @property
    def busy(self) -> int:
        """Open connections with a request in progress."""
        return sum(not c.idle for c in self._open)

    def forget(self, conn: GuardedConnection) -> None:
        """``conn`` is closed."""
        self._open.pop(conn, None)

    def _idle_victim(self) -> GuardedConnection | None:
        idle = [c for c in self._open if c.idle]
        return next((c for c in idle if not c.served), idle[0] if idle else None)


class GuardedConnection(asyncio.Protocol):
    """One connection: uvicorn's protocol ``inner`` does HTTP; this adds the header deadline and the cap.

    It reads two attributes that uvicorn's h11 and httptools protocols both have: ``cycle`` (the request/response
    in progress, None before the first request) and its ``response_complete``."""

    connections: ClassVar[ConnectionGuard]  # the classes guarded_protocol makes share one guard per server

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard, loop: asyncio.AbstractEventLoop) -> None:
        self.inner, self.guard, self.loop = inner, guard, loop
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._header_bytes = 0  # bytes received while the current request's headers are incomplete
        self._header_tail = b""  # their last 3 bytes: a blank line split across two reads is still found
        self._cut = False  # answered 431: whatever else arrives is dropped
        if hasattr(inner, "send_400_response"):  # uvicorn's answer to bytes it cannot parse is text/plain
            inner.send_400_response = self._malformed

    @property
    def served(self) -> bool:
        """Whether a request has started on this connection."""
        return getattr(self.inner, "cycle", None) is not None

    @property
    def idle(self) -> bool:
        """No request in progress: before the first, between two, or while a request's headers arrive."""
        cycle = getattr(self.inner, "cycle", None)
        return cycle is None or bool(getattr(cycle, "response_complete", True))

    @property
    def _awaiting_headers(self) -> bool:
        """Whether the bytes arriving now are (the start of) a request's headers: no request yet, or the last one's
        response and body both complete."""
        cycle = getattr(self.inner, "cycle", None)
        return cycle is None or (
            bool(getattr(cycle, "response_complete", True)) and not bool(getattr(cycle, "more_body", False))
        )

    def _malformed(self, msg: str) -> None:
        """In place of uvicorn's ``send_400_response`` (it has logged ``msg``): the same 400, as ``{"error": ...}``."""
        if self.transport is not None:
            self.transport.write(MALFORMED)
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream transport (uvloop's are not subclasses)
        if not self.guard.admit(self):
            self._refused = True
            self.transport.write(REFUSAL)
            self.transport.close()
            return
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused or self._cut:
            return
        # counted before the parser reads them (not the rest of a body answered early, a 413 before it was all
        # sent): headers that end within a read of the limit's size would be parsed whole before a count after it
        if self._awaiting_headers and self._over_header_limit(data):
            log.warning(
                "closed a connection sending over %d bytes of request headers (431)",
                MAX_HEADER_BYTES,
                extra={"throttle": "headers-too-large"},
            )
            self._cut = True  # nothing more reaches the parser
            if self.transport is not None:
                self.transport.write(HEADERS_TOO_LARGE)
            self.close()
            return
        self.inner.data_received(data)
        if not self.idle:
            self._header_bytes, self._header_tail = 0, b""
            self._disarm()  # headers complete: the app reads the body under its own deadline
        elif self._timer is None:
            self._arm()  # the first bytes of the next request on a kept-alive connection

    def _over_header_limit(self, data: bytes) -> bool:
        """Whether the request line and headers that ``data`` goes on with (or begins) take more than
        ``MAX_HEADER_BYTES``, up to the blank line that ends them if it is in ``data``."""
        seen = self._header_tail + data
        # a blank line, as h11 and httptools read one: CRLF or bare LF line ends, a CRLF blank line after LF ones
        ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n", b"\n\r\n") if (at := seen.find(mark)) >= 0]
        if ends:
            size = self._header_bytes + min(ends) - len(self._header_tail)
            self._header_bytes, self._header_tail = 0, b""
            return size > MAX_HEADER_BYTES
        self._header_bytes += len(data)
        self._header_tail = seen[-3:]
        return self._header_bytes > MAX_HEADER_BYTES

    def eof_received(self) -> bool | None:
        return None if self._refused or self._cut else self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.forget(self)
        if not self._refused:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if not self._refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self._refused:
            self.inner.resume_writing()

    def close(self) -> None:
        """Close the connection (it is idle: no response is cut short)."""
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.guard.limits.request_read_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self.idle:  # no complete request headers in time
            self.close()


def guarded_protocol(limits: ConnectionLimits, inner: type[asyncio.Protocol] | None = None) -> type[GuardedConnection]:
    """A protocol class for ``uvicorn.Config(http=...)``: uvicorn's own (``inner``, default its automatic choice)
    behind one ConnectionGuard shared by every connection of the server."""
    if inner is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        inner = AutoHTTPProtocol
    guard, http = ConnectionGuard(limits), inner

    class Guarded(GuardedConnection):
        connections = guard

        def __init__(self, **kwargs: Any) -> None:  # uvicorn's: config, server_state, app_state, _loop
            super().__init__(http(**kwargs), self.connections, kwargs.get("_loop") or asyncio.get_running_loop())

    return Guarded


def fd_headroom(max_connections: int) -> int:
    """Raise the soft file-descriptor limit (up to the hard one) to fit ``max_connections`` connections plus
    RESERVED_FDS; return the cap that fits (``max_connections``, or lower with a warning)."""
    try:
        import resource
    except ImportError:  # not a Unix: nothing to check
        return max_connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max_connections + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new_soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
            soft = new_soft
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return max_connections
    fitting = max(1, soft - RESERVED_FDS)
    log.warning(
        "only %d file descriptors allowed (ulimit -n): serving at most %d connections, not %d (max_connections)",
        soft,
        fitting,
        max_connections,
    )
    return fitting
