"""Requests per minute per client (req_limit): a minute's worth at once, then one every 60 / req_limit seconds; 429
with Retry-After beyond; health, languages and downloads never counted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.harness import EN_DE, FakeTranslator, IsolatedSettings, serve
from tests.service.test_files import upload
from transduce.service.ratelimit import RateLimiter

pytestmark = pytest.mark.anyio


def test_a_bucket_holds_a_minutes_worth_and_refills_at_the_rate() -> None:
    limiter = RateLimiter(60)  # one a second
    assert [limiter.wait("a", now=100.0) for _ in range(60)] == [0.0] * 60
    assert limiter.wait("a", now=100.0) == pytest.approx(1.0)  # nothing taken by a refusal
    assert limiter.wait("a", now=100.5) == pytest.approx(0.5)
    assert limiter.wait("a", now=101.0) == 0.0 and limiter.wait("a", now=101.0) > 0
    assert limiter.wait("b", now=101.0) == 0.0  # another client: its own bucket
    assert limiter.wait("a", now=1000.0) == 0.0 and [limiter.wait("a", now=1000.0) for _ in range(59)] == [0.0] * 59
    assert limiter.wait("a", now=1000.0) > 0  # refilled to a minute's worth, no more
    assert RateLimiter(0).wait("a") == 0.0 and len(RateLimiter(0)) == 0  # off: nothing kept
    few = RateLimiter(1, max_clients=3)
    for client in "wxyz":
        few.wait(client, now=0.0)
    assert len(few) == 3 and few.wait("w", now=0.0) == 0.0  # the least recently seen went first
    with pytest.raises(ValueError, match="req_limit must be >= 0"):
        RateLimiter(-1)


def test_a_keys_limit_raised_by_a_reload_takes_effect_at_once() -> None:
    """A key at 2 a minute, used up, then given 600: the extra minute's worth is there at once (it waited for its
    old bucket to refill, told "at most 600 a minute"); lowered, the bucket is cut to the new minute's worth."""
    limiter = RateLimiter(0)
    assert [limiter.wait("key k", now=10.0, per_minute=2) for _ in range(3)][2] > 0
    assert [limiter.wait("key k", now=10.0, per_minute=600) for _ in range(598)] == [0.0] * 598
    assert limiter.wait("key k", now=10.0, per_minute=600) > 0
    assert limiter.wait("key k", now=100.0, per_minute=1) == 0.0 and limiter.wait("key k", now=100.0, per_minute=1) > 0


async def test_a_client_over_req_limit_gets_429_with_retry_after() -> None:
    fake = FakeTranslator()
    async with serve(fake, req_limit=3) as (client, _):
        assert (await client.post("/translate", json={"q": "One.", **EN_DE})).status_code == 200
        assert (await client.post("/detect", json={"q": "Hello there, how are you?"})).status_code == 200
        assert (await upload(client, "a.txt", b"Two.")).status_code == 200
        refused = [
            await client.post("/translate", json={"q": "Three.", **EN_DE}),
            await client.post("/detect", json={"q": "Hello."}),
            await upload(client, "b.txt", b"Four."),
        ]
        for r in refused:
            assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 20, r.text
            assert r.json()["error"].startswith("too many requests: at most 3 a minute from one client (req_limit)")
        for path in ("/health", "/health/ready", "/languages", "/frontend/settings"):
            assert (await client.get(path)).status_code == 200, path  # never counted
        metrics = (await client.get("/metrics")).text
    assert 'transduce_requests_total{status="429"} 2.0' in metrics  # /translate and /translate_file
    assert 'transduce_detect_requests_total{status="429"} 1.0' in metrics
    assert "Three." not in fake.translated and "Four." not in fake.translated
    with pytest.raises(ValueError, match="must be >= 0"):
        IsolatedSettings(req_limit=-1)


async def test_with_api_keys_each_key_is_a_client_and_refused_keys_count_against_the_address() -> None:
    """Clients behind one address (a NAT, a proxy) shared one bucket, and a request without a key took from it
    before its 401: with keys, the bucket is the key's, taken once the key is let in; a request refused for its key
    takes from its address's, so guessing keys is limited too."""
    async with serve(FakeTranslator(), req_limit=1, api_keys="k1,k2") as (client, _):
        refused = [(await client.post("/translate", json={"q": "Hi.", **EN_DE})).status_code for _ in range(3)]
        assert refused == [401, 429, 429]
        first = await client.post("/translate", json={"q": "Hi.", **EN_DE, "api_key": "k1"})
        other = await client.post("/translate", json={"q": "Hi.", **EN_DE}, headers={"Authorization": "Bearer k2"})
        again = await client.post("/translate", json={"q": "Hi.", **EN_DE, "api_key": "k1"})
    assert (first.status_code, other.status_code, again.status_code) == (200, 200, 429)


async def test_wrong_keys_count_against_the_address_on_health_and_admin_too() -> None:
    """With protect_health, /health* and /metrics check keys too: a wrong key there was never counted, so keys could
    be tried there as fast as a client liked (and the admin key at /admin/reload)."""
    async with serve(FakeTranslator(), req_limit=2, api_keys="k1", protect_health=True, admin_key="a1") as (client, _):
        tries = [(await client.get("/health", headers={"Authorization": f"Bearer x{n}"})).status_code for n in range(3)]
        admin = (await client.post("/admin/reload", headers={"X-Admin-Key": "wrong"})).status_code
        right = (await client.get("/health", headers={"Authorization": "Bearer k1"})).status_code
    assert (tries, admin, right) == ([403, 403, 429], 429, 200)  # a right key is never counted there


def test_a_keys_bucket_is_never_dropped_for_addresses() -> None:
    """Requests refused for their key fill address buckets: 100,000 of them from as many addresses pushed a key's
    used-up bucket out, and it came back full."""
    limiter = RateLimiter(1, max_clients=3)
    assert limiter.wait("key abc", now=0.0) == 0.0 and limiter.wait("key abc", now=0.0) > 0
    for n in range(10):
        limiter.wait(f"203.0.113.{n}", now=0.0)
    assert limiter.wait("key abc", now=0.0) > 0 and len(limiter) == 4


def test_a_client_is_its_address_its_ipv6_network_or_one_unknown() -> None:
    from starlette.requests import Request

    from transduce.service.ratelimit import client_id

    def request(host: str | None) -> Request:
        return Request({"type": "http", "client": None if host is None else (host, 1), "headers": []})

    assert client_id(request("203.0.113.7"), None) == "203.0.113.7"
    assert client_id(request("::ffff:203.0.113.7"), None) == "203.0.113.7"  # IPv4 on a dual-stack socket
    assert client_id(request("2001:db8:1:2:aaaa::1"), None) == client_id(request("2001:db8:1:2::9"), None)
    assert client_id(request("2001:db8:1:2::9"), None) == "2001:db8:1:2::/64"  # a client holds its whole /64
    assert client_id(request("::1"), None) == "::1"  # not ::/64, with ::1.2.3.4 and the like
    junk = "1.2.3.4, " * 7000  # what a proxy trusted with "*" may pass on from a client's X-Forwarded-For
    assert client_id(request(junk), None) == client_id(request(None), None) == "unknown"
    assert client_id(request("203.0.113.7"), "k1") == client_id(request("198.51.100.1"), "k1") != "k1"


async def test_without_keys_a_client_over_its_limit_is_refused_before_its_body_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transduce.service.routers import translate

    read: list[int] = []
    real = translate.read_translate_request

    async def counting(*args: Any, **kwargs: Any) -> Any:
        read.append(1)
        return await real(*args, **kwargs)

    monkeypatch.setattr(translate, "read_translate_request", counting)
    async with serve(FakeTranslator(), req_limit=1) as (client, _):
        codes = [(await client.post("/translate", json={"q": "Hi.", **EN_DE})).status_code for _ in range(3)]
    assert codes == [200, 429, 429] and len(read) == 1
