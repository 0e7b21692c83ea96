"""Requests per minute per client (``req_limit``, LibreTranslate's ``--req-limit``): one client sending as fast as it
can no longer takes the whole queue from everybody else (the queue is fair between requests, not between clients).

A token bucket per client (``client_id``: its API key when the server has keys, else its address): a minute's worth of
requests at once, then one every ``60 / req_limit`` seconds; checked before the body is read when the server has no
keys, else once the key is accepted, a request refused for its key counting against its address
(``deps.accepted_key``). The address is the connection's, or what a trusted proxy says it is (uvicorn reads
``X-Forwarded-For`` from the addresses in ``FORWARDED_ALLOW_IPS``, 127.0.0.1 and ::1 by default). At most
``MAX_CLIENTS`` address buckets are kept, the least recently used dropped first (a dropped bucket is a full one: a
client with that many addresses gains nothing it could not have had from them anyway); an API key's bucket is never
dropped (the keys configured bound them: a client that had used up its key's requests refilled it by sending
100,000 keyless requests from as many addresses)."""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from collections import OrderedDict

from starlette.requests import Request

from transduce.service.errors import ApiError

MAX_CLIENTS = 100_000  # address buckets kept (about 260 bytes each: 26 MB)
KEY_CLIENT = "key "  # how an API key's client is named (never an address's)


class RateLimiter:
    """Token buckets of ``per_minute`` requests per client; ``per_minute`` 0: no limit."""

    def __init__(self, per_minute: int, *, max_clients: int = MAX_CLIENTS) -> None:
        if per_minute < 0:
            raise ValueError(f"req_limit must be >= 0 (0 = no limit), got {per_minute}")
        self.per_minute, self.max_clients = per_minute, max_clients
        # client -> (tokens, when counted, the capacity they were counted against)
        self._buckets: OrderedDict[str, tuple[float, float, float]] = OrderedDict()
        self._keys: dict[str, tuple[float, float, float]] = {}  # the same for API keys' clients ("key ..."): kept

    def __len__(self) -> int:
        return len(self._buckets) + len(self._keys)

    def forget_keys_but(self, clients: set[str]) -> None:
        """Drop the buckets of API keys' clients not in ``clients`` (keys revoked by a reload of the key file)."""
        for client in [c for c in self._keys if c not in clients]:
            del self._keys[client]

    def wait(self, client: str, now: float | None = None, per_minute: int | None = None) -> float:
        """Take one request from ``client``'s bucket: 0 when it may go, else the seconds until it may (nothing
        taken). ``per_minute``: this client's own limit (an API key's), instead of the server's. Used from the event
        loop only (no lock needed)."""
        limit = self.per_minute if per_minute is None else per_minute
        if not limit:
            return 0.0
        now = time.monotonic() if now is None else now
        capacity, rate = float(limit), limit / 60.0
        buckets = self._keys if client.startswith(KEY_CLIENT) else self._buckets
        tokens, then, was = buckets.pop(client, (capacity, now, capacity))
        if capacity > was:  # a key's limit raised (a reload of the key file): the extra minute's worth at once
            tokens += capacity - was
        tokens = min(capacity, tokens + (now - then) * rate)
        wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / rate
        buckets[client] = (tokens - 1.0 if not wait else tokens, now, capacity)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait


def key_client(key: str) -> str:
    """The client an API key is (its bucket's name: never the key itself)."""
    return KEY_CLIENT + hashlib.sha256(key.encode()).hexdigest()[:32]


def client_id(request: Request, key: str | None) -> str:
    """Whose bucket ``request`` takes from: its API key's when the server has keys (every client behind one address,
    a NAT or an unconfigured proxy, was one client), else its address: an IPv4 one, or an IPv6 one's /64 network (a
    client holds the whole /64); an address that is none (a unix socket, a proxy's header with junk in it) is one
    shared "unknown" (the raw header was the key: any text, up to 64 KiB a bucket)."""
    if key is not None:
        return key_client(key)
    try:
        address = ipaddress.ip_address(request.client.host if request.client is not None else "")
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:1.2.3.4, an IPv4 client on a dual-stack socket
            return str(address.ipv4_mapped)
        if address.is_loopback:  # ::1 alone (its /64, ::/64, holds the IPv4-compatible addresses too)
            return str(address)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def check_rate(limiter: RateLimiter, request: Request, key: str | None = None, per_minute: int | None = None) -> None:
    """429 with Retry-After when the request's client (``client_id``: ``key``, the API key it was let in with, when
    the server has keys) has used up its requests for now; ``per_minute``: that key's own limit (the key file's)."""
    wait = limiter.wait(client_id(request, key), per_minute=per_minute)
    if wait:
        whose = "this API key (its limit in api_keys_file)" if per_minute is not None else "one client (req_limit)"
        raise ApiError(
            429,
            f"too many requests: at most {limiter.per_minute if per_minute is None else per_minute} a minute from "
            f"{whose}; retry in {math.ceil(wait)} s",
            {"Retry-After": str(math.ceil(wait))},
        )
