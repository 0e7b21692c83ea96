"""The load generator's HTTP client against small asyncio servers that answer in each way HTTP/1.x allows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from transduce.bench.http_client import Client, HttpError


@dataclass(frozen=True)
class Answer:
    """What the test server does with one request: send ``raw`` after ``delay`` seconds, then close the connection
    if ``close``; ``silent``: answer nothing and wait for the client to close; ``reset``: abort the connection."""

    raw: bytes = b""
    close: bool = False
    delay: float = 0.0
    silent: bool = False
    reset: bool = False


Reply = Callable[[int, bytes], Answer]  # (request number from 1, on any connection; its body) -> the answer


def echo(number: int, body: bytes, *, status: int = 200, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    out = json.dumps({"n": number, "echo": json.loads(body)}).encode()
    head = b"HTTP/%s %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (version, status, len(out))
    return head + extra + b"\r\n" + out


def echoing(**options: Any) -> Reply:
    close = options.pop("close", False)
    return lambda n, body: Answer(echo(n, body, **options), close=close)


@dataclass
class Counts:
    connections: int = 0
    requests: int = 0
    closed_by_client: int = 0  # connections that ended with the client's close between requests


async def _serve(reply: Reply) -> tuple[asyncio.Server, Counts]:
    counts = Counts()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    counts.closed_by_client += 1
                    return
                fields = (h.partition(b":") for h in head.split(b"\r\n"))
                length = next(int(v) for k, _, v in fields if k == b"content-length")
                body = await reader.readexactly(length)
                counts.requests += 1
                answer = reply(counts.requests, body)
                await asyncio.sleep(answer.delay)
                if answer.reset:
                    writer.transport.abort()
                    return
                if answer.silent:
                    await reader.read()
                    return
                writer.write(answer.raw)
                await writer.drain()
                if answer.close:
                    return
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), counts


def _run(reply: Reply, use: Callable[[Client], Awaitable[Any]]) -> tuple[Any, Counts]:
    """``use(client)`` against a server answering with ``reply``; its result and what the server counted."""

    async def main() -> tuple[Any, Counts]:
        server, counts = await _serve(reply)
        port = server.sockets[0].getsockname()[1]
        async with server:
            async with Client(f"http://127.0.0.1:{port}", timeout=2) as client:
                result = await use(client)
                assert client.connections_opened == counts.connections
            await asyncio.sleep(0.05)  # the server sees the closes
            return result, counts

    return asyncio.run(main())


def _in_turn(n: int) -> Callable[[Client], Awaitable[list[Any]]]:
    async def use(client: Client) -> list[Any]:
        return [(await client.post_json("/translate", {"q": i})).json() for i in range(n)]

    return use


def test_keeps_one_connection_alive_for_requests_in_turn_and_closes_it_at_the_end() -> None:
    answers, counts = _run(echoing(), _in_turn(5))
    assert answers == [{"n": i + 1, "echo": {"q": i}} for i in range(5)]
    assert counts.connections == 1 and counts.closed_by_client == 1  # aclose() closed the idle connection


def test_concurrent_requests_open_a_connection_each_then_reuse_them() -> None:
    async def use(client: Client) -> list[int]:
        statuses = []
        for _ in range(3):
            replies = await asyncio.gather(*(client.post_json("/x", {"q": i}) for i in range(4)))
            statuses += [r.status for r in replies]
        return statuses

    statuses, counts = _run(echoing(), use)
    assert statuses == [200] * 12 and counts.connections == 4 and counts.requests == 12


def test_error_statuses_come_back_with_their_body() -> None:
    response, _ = _run(echoing(status=413), lambda client: client.post_json("/translate", {"q": "x"}))
    assert response.status == 413 and response.json() == {"n": 1, "echo": {"q": "x"}}


def test_reads_a_chunked_body_and_skips_an_interim_response() -> None:
    def chunked(n: int, body: bytes) -> Answer:
        parts = [body[:3], body[3:]]
        chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts)
        interim = b"HTTP/1.1 100 Continue\r\n\r\n"
        return Answer(
            interim + b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nt: x\r\n\r\n"
        )

    async def twice(client: Client) -> list[bytes]:
        return [(await client.post_json("/", {"a": i})).body for i in range(2)]

    bodies, counts = _run(chunked, twice)
    assert bodies == [b'{"a": 0}', b'{"a": 1}'] and counts.connections == 1  # the connection is kept


def test_a_body_that_ends_with_the_connection() -> None:
    bodies, counts = _run(lambda n, body: Answer(b"HTTP/1.1 200 OK\r\n\r\n" + body, close=True), _in_turn(2))
    assert bodies == [{"q": 0}, {"q": 1}] and counts.connections == 2


@pytest.mark.parametrize(
    "reply",
    [echoing(extra=b"Connection: keep-alive, close\r\n"), echoing(version=b"1.0")],
    ids=["connection-close", "http-1.0"],
)
def test_a_connection_the_server_will_close_is_not_reused(reply: Reply) -> None:
    answers, counts = _run(reply, _in_turn(3))  # the server keeps it open: only the client's reading closes it
    assert [a["n"] for a in answers] == [1, 2, 3] and counts.connections == 3 and counts.requests == 3


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_request_sent_again() -> None:
    async def use(client: Client) -> list[int]:
        statuses = []
        for i in range(3):
            statuses.append((await client.post_json("/", {"q": i})).status)
            if i == 1:
                await asyncio.sleep(0.05)  # the close has arrived: the connection is dropped before use
        return statuses

    statuses, counts = _run(echoing(close=True), use)  # closes after each answer, unannounced
    assert statuses == [200] * 3 and counts.connections == 3 and counts.requests == 3


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_new_connection_closed_without_an_answer_is_an_error_and_not_retried(reset: bool) -> None:
    async def use(client: Client) -> None:
        with pytest.raises(HttpError, match="without answering"):
            await client.post_json("/", {})

    _, counts = _run(lambda n, body: Answer(reset=reset, close=True), use)
    assert counts.connections == 1 and counts.requests == 1


def test_a_request_whose_answer_began_is_not_sent_again() -> None:
    def reply(n: int, body: bytes) -> Answer:
        return Answer(echo(n, body)) if n == 1 else Answer(b"HTTP/1.1 200 OK\r\n", close=True)

    async def use(client: Client) -> None:
        await client.post_json("/", {})
        with pytest.raises(HttpError, match="inside the response headers"):
            await client.post_json("/", {})

    _, counts = _run(reply, use)
    assert counts.requests == 2 and counts.connections == 1


def test_a_request_that_times_out_takes_its_connection_with_it() -> None:
    def reply(n: int, body: bytes) -> Answer:
        return Answer(echo(n, body), delay=0.5 if n == 1 else 0.0)

    async def use(client: Client) -> Any:
        client.timeout = 0.2
        with pytest.raises(TimeoutError):
            await client.post_json("/", {"q": 1})
        assert not client._idle  # not pooled with its answer still to come
        client.timeout = 2
        return (await client.post_json("/", {"q": 2})).json()

    answer, counts = _run(reply, use)
    assert answer == {"n": 2, "echo": {"q": 2}} and counts.connections == 2


def test_a_server_that_does_not_answer_times_out() -> None:
    async def use(client: Client) -> None:
        client.timeout = 0.2
        with pytest.raises(TimeoutError):
            await client.post_json("/", {"q": 1})

    _, counts = _run(lambda n, body: Answer(silent=True), use)
    assert counts.connections == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-1\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: " + b"y" * 70_000 + b"\r\n\r\n",
    ],
    ids=["not-http", "short-body", "negative-length", "negative-chunk", "chunk-without-crlf", "long-header"],
)
def test_a_response_that_is_not_readable_http_is_an_error(raw: bytes) -> None:
    async def use(client: Client) -> None:
        with pytest.raises(HttpError):
            await client.post_json("/", {})

    _run(lambda n, body: Answer(raw, close=True), use)


def test_a_connection_in_use_when_the_client_closes_is_closed_after_its_request() -> None:
    async def use(client: Client) -> int:
        pending = asyncio.ensure_future(client.post_json("/", {"q": 1}))
        await asyncio.sleep(0.05)
        await client.aclose()
        status = (await pending).status
        assert not client._idle
        return status

    status, counts = _run(lambda n, body: Answer(echo(n, body), delay=0.2), use)
    assert status == 200 and counts.closed_by_client == 1


def test_only_plain_http_to_a_root_url() -> None:
    for url in ("https://example.org", "http://127.0.0.1:8000/api", "127.0.0.1:8000"):
        with pytest.raises(ValueError, match="plain HTTP"):
            Client(url)
    with pytest.raises(ValueError, match="timeout"):
        Client("http://127.0.0.1:1", timeout=0)
    assert Client("http://[::1]:8000")._host_header == "[::1]:8000"
