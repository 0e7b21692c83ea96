"""The load generator's HTTP/1.1 client: keep-alive connections over asyncio streams, JSON POSTs, nothing else.

``bench load`` runs its clients on the same cores as the service it measures. httpx's async client spent about 2 ms
of CPU per request there (1-6 ms in the load tables), as much as the service's own work per greedy request, and that
CPU was taken from the service; this client spends about 0.05 ms (measured against a trivial server in one process,
16 concurrent clients). It speaks plain HTTP to a ``http://host:port`` URL: responses with a Content-Length, chunked
ones, or ones that end when the server closes the connection."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024  # a response's status line and headers, at most


class HttpError(Exception):
    """The server's answer was not HTTP/1.x the client can read, or the connection ended mid-response."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Client:
    """Keep-alive connections to one server, opened as concurrent requests need them and reused after.

    A request sent on a reused connection that the server had closed meanwhile (its idle keep-alive timeout) is sent
    again once on a new connection, when no byte of an answer came back. ``timeout``: seconds for a whole request,
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

    async def post_json(self, path: str, payload: Any) -> Response:
        """POST ``payload`` as JSON to ``path``; the response whatever its status."""
        body = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        return await asyncio.wait_for(self._exchange(head.encode() + body), self.timeout)

    async def _exchange(self, request: bytes) -> Response:
        while self._idle:  # reused: the server may have closed it since
            connection = self._idle.pop()
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
        done = False
        try:
            try:
                writer.write(request)
                await writer.drain()
                status_line = await reader.readline()
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                raise _ClosedBeforeAnswer from exc
            if not status_line:
                raise _ClosedBeforeAnswer
            response, keep = await _read_response(status_line, reader)
            done = keep
            return response
        finally:
            if done and not self._closed:
                self._idle.append(connection)
            else:
                writer.close()


class _ClosedBeforeAnswer(Exception):
    """The connection ended before the first byte of an answer."""


async def _read_response(status_line: bytes, reader: asyncio.StreamReader) -> tuple[Response, bool]:
    """The response after its status line, and whether the connection can carry another request."""
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise HttpError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    status = int(parts[1])
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
            break
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    keep = parts[0] == b"HTTP/1.1" and headers.get(b"connection", b"").lower() != b"close"
    try:
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            body = await _read_chunked(reader)
        elif b"content-length" in headers:
            body = await reader.readexactly(_length(headers[b"content-length"]))
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:  # the body ends when the server closes the connection
            body, keep = await reader.read(), False
    except asyncio.IncompleteReadError as exc:
        raise HttpError("the connection ended inside the response body") from exc
    return Response(status, body), keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise asyncio.IncompleteReadError(b"", None)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise HttpError(f"not a chunk size: {size_line[:40]!r}") from exc
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the chunk's CRLF


def _length(value: bytes) -> int:
    if not value.isdigit():
        raise HttpError(f"not a content length: {value[:40]!r}")
    return int(value)
