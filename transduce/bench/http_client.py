"""The load generator's HTTP/1.1 client: keep-alive connections over asyncio streams, JSON POSTs, nothing else.

``bench load`` runs its clients on the same cores as the service it measures. httpx's async client spent about 2 ms
of CPU per request there (1-6 ms in the load tables), as much as the service's own work per greedy request, and that
CPU was taken from the service; this client spends about 0.05 ms (measured against a trivial server in one process,
16 concurrent clients). It speaks plain HTTP to a ``http://host:port`` URL: responses with a Content-Length, chunked
ones, or ones that end when the server closes the connection."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024  # a response's status line and headers, at most
_DIGITS = re.compile(rb"[0-9]+")
_HEX = re.compile(rb"[0-9A-Fa-f]+")


class HttpError(Exception):
    """The server's answer was not HTTP/1.x the client can read, or the connection ended mid-response."""


@dataclass(frozen=True)
class Response:
    """A final response: its status code and its whole body."""

    status: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Client:
    """Keep-alive connections to one server, opened as concurrent requests need them and reused after.

    Idle connections the server has closed (its idle keep-alive timeout) are dropped before a request is written;
    one whose close was still on its way when the request went out gets the request again on another connection, as
    long as no byte of an answer came back (the server never read it). ``timeout``: seconds for a whole request,
    connecting included (``TimeoutError`` beyond)."""

    def __init__(self, url: str, *, timeout: float = 600.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(
                f"the load generator speaks plain HTTP to a server's root URL (http://host:port), got {url!r}"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.host, self.port = parts.hostname, parts.port or 80
        self._host_header = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        self.timeout = timeout
        self.connections_opened = 0
        self._idle: list[_Connection] = []
        self._closed = False

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the idle connections (a connection in use is closed by its request when it ends)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()
        await asyncio.gather(*(writer.wait_closed() for _, writer in idle), return_exceptions=True)

    async def post_json(self, path: str, payload: Any) -> Response:
        """POST ``payload`` as JSON to ``path``; the response whatever its status."""
        body = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self._host_header}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        async with asyncio.timeout(self.timeout):  # no task of its own, unlike wait_for
            return await self._exchange(head.encode() + body)

    async def _exchange(self, request: bytes) -> Response:
        while self._idle:  # reused: the server may have closed it since
            connection = self._idle.pop()
            if connection[0].at_eof():  # its close has arrived: never write to it
                connection[1].close()
                continue
            try:
                return await self._on(connection, request)
            except _ClosedBeforeAnswer:
                continue
        self.connections_opened += 1
        try:
            return await self._on(await asyncio.open_connection(self.host, self.port), request)
        except _ClosedBeforeAnswer as exc:
            raise HttpError("the server closed the connection without answering") from exc

    async def _on(self, connection: _Connection, request: bytes) -> Response:
        reader, writer = connection
        keep = False
        try:
            try:
                writer.write(request)
                await writer.drain()
                status_line = await reader.readline()
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                raise _ClosedBeforeAnswer from exc
            if not status_line:
                raise _ClosedBeforeAnswer
            try:
                response, keep = await _read_response(status_line, reader)
            except ValueError as exc:  # StreamReader: a line over its limit
                raise HttpError(f"unreadable response: {exc}") from exc
            return response
        finally:  # nothing awaited between the response read in full and here
            if keep and not self._closed:
                self._idle.append(connection)
            else:
                writer.close()


class _ClosedBeforeAnswer(Exception):
    """The connection ended before the first byte of an answer."""


async def _read_response(status_line: bytes, reader: asyncio.StreamReader) -> tuple[Response, bool]:
    """The final response from its status line on (interim 1xx responses skipped), and whether the connection can
    carry another request."""
    while True:
        status, headers = await _read_head(status_line, reader)
        if not 100 <= status < 200:
            break
        status_line = await reader.readline()  # the interim response had no body: the final one follows
    # uvicorn sends neither repeated headers nor lists in Connection; the last value of a name wins here
    keep = status_line.startswith(b"HTTP/1.1") and b"close" not in _tokens(headers.get(b"connection", b""))
    try:
        if status in (204, 304):
            body = b""
        elif b"chunked" in _tokens(headers.get(b"transfer-encoding", b"")):
            body = await _read_chunked(reader)
        elif b"content-length" in headers:
            body = await reader.readexactly(_length(headers[b"content-length"]))
        else:  # the body ends when the server closes the connection
            body, keep = await reader.read(), False
    except asyncio.IncompleteReadError as exc:
        raise HttpError("the connection ended inside the response body") from exc
    return Response(status, body), keep


async def _read_head(status_line: bytes, reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
    """The status code and the headers (names lower-cased) of one response."""
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not _DIGITS.fullmatch(parts[1]):
        raise HttpError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers: dict[bytes, bytes] = {}
    size = len(status_line)
    while True:
        line = await reader.readline()
        size += len(line)
        if size > MAX_HEAD:
            raise HttpError(f"response headers longer than {MAX_HEAD} bytes")
        if not line:
            raise HttpError("the connection ended inside the response headers")
        if line in (b"\r\n", b"\n"):
            return int(parts[1]), headers
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body: sizes in hex, each chunk followed by CRLF, then a zero size and optional trailers."""
    chunks: list[bytes] = []
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise asyncio.IncompleteReadError(b"", None)
        digits = size_line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(digits):
            raise HttpError(f"not a chunk size: {size_line[:40]!r}")
        size = int(digits, 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError("a chunk not followed by CRLF")


def _length(value: bytes) -> int:
    """A Content-Length value: decimal digits only."""
    if not _DIGITS.fullmatch(value):
        raise HttpError(f"not a content length: {value[:40]!r}")
    return int(value)


def _tokens(value: bytes) -> list[bytes]:
    """The comma-separated tokens of a header value, lower-cased."""
    return [t.strip().lower() for t in value.split(b",")]
