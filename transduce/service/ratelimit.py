"""Requests per minute per client (``req_limit``, LibreTranslate's ``--req-limit``): one client sending as fast as it
can no longer takes the whole queue from everybody else (the queue is fair between requests, not between clients).

A token bucket per client address: a minute's worth of requests at once, then one every ``60 / req_limit`` seconds.
The address is the connection's, or what a trusted proxy says it is (uvicorn reads ``X-Forwarded-For`` from the
addresses in ``FORWARDED_ALLOW_IPS``, 127.0.0.1 by default). At most ``MAX_CLIENTS`` buckets are kept, the least
recently used dropped first (a dropped bucket is a full one: a client with that many addresses gains nothing it
could not have had from them anyway)."""

from __future__ import annotations

import math
import time
from collections import OrderedDict

from starlette.requests import Request

from transduce.service.errors import ApiError

MAX_CLIENTS = 100_000  # buckets kept (about 150 bytes each)


class RateLimiter:
    """Token buckets of ``per_minute`` requests per client; ``per_minute`` 0: no limit."""

    def __init__(self, per_minute: int, *, max_clients: int = MAX_CLIENTS) -> None:
        if per_minute < 0:
            raise ValueError(f"req_limit must be >= 0 (0 = no limit), got {per_minute}")
        self.per_minute, self.max_clients = per_minute, max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, when counted)

    def __len__(self) -> int:
        return len(self._buckets)

    def wait(self, client: str, now: float | None = None) -> float:
        """Take one request from ``client``'s bucket: 0 when it may go, else the seconds until it may (nothing
        taken). Used from the event loop only (no lock needed)."""
        if not self.per_minute:
            return 0.0
        now = time.monotonic() if now is None else now
        capacity, rate = float(self.per_minute), self.per_minute / 60.0
        tokens, then = self._buckets.pop(client, (capacity, now))
        tokens = min(capacity, tokens + (now - then) * rate)
        wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / rate
        self._buckets[client] = (tokens - 1.0 if not wait else tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait


def client_address(request: Request) -> str:
    """Who sent ``request``: its client address (a proxy's X-Forwarded-For, where uvicorn trusts the proxy)."""
    return request.client.host if request.client is not None else "unknown"


def check_rate(limiter: RateLimiter, request: Request) -> None:
    """429 with Retry-After when the request's client has used up its requests for now."""
    wait = limiter.wait(client_address(request))
    if wait:
        raise ApiError(
            429,
            f"too many requests from {client_address(request)}: at most {limiter.per_minute} a minute (req_limit); "
            f"retry in {math.ceil(wait)} s",
            {"Retry-After": str(math.ceil(wait))},
        )
