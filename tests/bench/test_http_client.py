"""The load generator's HTTP client against small asyncio servers that answer in each way HTTP/1.1 allows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from transduce.bench.http_client import Client, HttpError

Reply = Callable[[bytes], bytes]  # request body -> the raw response


def _json_reply(status: int = 200, extra: bytes = b"") -> Reply:
    def reply(body: bytes) -> bytes:
        out = json.dumps({"echo": json.loads(body)}).encode()
        return (
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
            % (
                status,
                len(out),
                extra,
            )
            + out
        )

    return reply


async def _serve(reply: Reply, *, close_after: bool = False, silent: bool = False) -> tuple[asyncio.Server, list[int]]:
    """A server answering each request on a connection with ``reply``; ``close_after``: it then closes the connection
    (without saying so); ``silent``: it reads the request and never answers. Returns it and a list that counts its
    connections."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k == b"content-length"
                )
                body = await reader.readexactly(length)
                if silent:
                    await asyncio.sleep(60)
                writer.write(reply(body))
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, accepted


def _run(reply: Reply, use: Callable[[Client], Awaitable[Any]], **serve: bool) -> tuple[Any, int]:
    """``use(client)`` against a server answering with ``reply``; its result and the connections the server took."""

    async def main() -> tuple[Any, int]:
        server, accepted = await _serve(reply, **serve)
        port = server.sockets[0].getsockname()[1]
        async with server, Client(f"http://127.0.0.1:{port}", timeout=2) as client:
            result = await use(client)
            assert client.connections_opened == len(accepted)
            return result, len(accepted)

    return asyncio.run(main())


def test_keeps_one_connection_alive_for_requests_in_turn() -> None:
    async def use(client: Client) -> list[Any]:
        return [(await client.post_json("/translate", {"q": i})).json() for i in range(5)]

    answers, connections = _run(_json_reply(), use)
    assert answers == [{"echo": {"q": i}} for i in range(5)] and connections == 1


def test_concurrent_requests_open_a_connection_each_then_reuse_them() -> None:
    async def use(client: Client) -> list[int]:
        statuses = []
        for _ in range(3):
            replies = await asyncio.gather(*(client.post_json("/x", {"q": i}) for i in range(4)))
            statuses += [r.status for r in replies]
        return statuses

    statuses, connections = _run(_json_reply(), use)
    assert statuses == [200] * 12 and connections == 4


def test_error_statuses_come_back_with_their_body() -> None:
    response, _ = _run(_json_reply(413), lambda client: client.post_json("/translate", {"q": "x"}))
    assert response.status == 413 and response.json() == {"echo": {"q": "x"}}


def test_reads_a_chunked_body_and_a_body_that_ends_with_the_connection() -> None:
    def chunked(body: bytes) -> bytes:
        parts = [body[:3], body[3:]]
        chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts)
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\ntrailer: x\r\n\r\n"

    async def twice(client: Client) -> list[bytes]:
        return [(await client.post_json("/", {"a": 1})).body for _ in range(2)]

    bodies, connections = _run(chunked, twice)
    assert bodies == [b'{"a": 1}'] * 2 and connections == 1  # chunked: the connection is kept

    def until_close(body: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\n\r\n" + body

    bodies, connections = _run(until_close, twice, close_after=True)
    assert bodies == [b'{"a": 1}'] * 2 and connections == 2


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_request_sent_again() -> None:
    async def use(client: Client) -> list[int]:
        return [(await client.post_json("/", {"q": i})).status for i in range(3)]

    statuses, connections = _run(_json_reply(), use, close_after=True)  # closes after each answer, unannounced
    assert statuses == [200] * 3 and connections == 3
    statuses, connections = _run(_json_reply(extra=b"Connection: close\r\n"), use, close_after=True)
    assert statuses == [200] * 3 and connections == 3


def test_a_server_that_does_not_answer_times_out() -> None:
    async def use(client: Client) -> None:
        client.timeout = 0.2
        with pytest.raises(TimeoutError):
            await client.post_json("/", {"q": 1})

    _run(_json_reply(), use, silent=True)


@pytest.mark.parametrize(
    "raw",
    [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", b"HTTP/1.1 200 OK\r\n"],
    ids=["not-http", "short-body", "no-headers-end"],
)
def test_a_response_that_is_not_http_is_an_error(raw: bytes) -> None:
    async def use(client: Client) -> None:
        with pytest.raises(HttpError):
            await client.post_json("/", {})

    def reply(body: bytes) -> bytes:
        return raw

    _run(reply, use, close_after=True)


def test_only_plain_http_to_a_root_url() -> None:
    for url in ("https://example.org", "http://127.0.0.1:8000/api", "127.0.0.1:8000"):
        with pytest.raises(ValueError, match="plain HTTP"):
            Client(url)
    with pytest.raises(ValueError, match="timeout"):
        Client("http://127.0.0.1:1", timeout=0)
