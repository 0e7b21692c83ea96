"""What /metrics and the access log say of a request, from the metrics probe of 2026-11-26: characters are counted
for translated requests only, HEAD is logged as HEAD, plain-text access lines carry their fields, and the shutdown
grace's cut-off is logged as such; /detect is logged and counted apart."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from tests.service.harness import EN_DE, FakeTranslator, Gate, metric, serve
from tests.service.test_draining import Slow, a_file
from transduce.service.draining import drain
from transduce.service.logging import PlainFormatter

pytestmark = pytest.mark.anyio


async def test_characters_are_counted_for_translated_requests_only() -> None:
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, request_timeout_s=0.3, max_batch_size=1, max_wait_ms=0) as (client, _):
        counted = metric((await client.get("/metrics")).text, "transduce_characters_total")
        assert (await client.post("/translate", json={"q": "Hello there.", **EN_DE})).status_code == 200
        after_one = metric((await client.get("/metrics")).text, "transduce_characters_total")
        assert after_one == counted + len("Hello there.")
        gate.hold()
        late = await client.post("/translate", json={"q": "Too slow for its deadline.", **EN_DE})
        assert late.status_code == 504
        refused = await client.post("/translate_file", **a_file(3))  # its deadline passes too
        assert refused.status_code == 504
        gate.release()
        assert metric((await client.get("/metrics")).text, "transduce_characters_total") == after_one


async def test_head_is_logged_as_head(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="transduce.access")
    async with serve() as (client, _):
        r = await client.head("/translate")
        assert r.status_code == 405
    (record,) = [r for r in caplog.records if r.name == "transduce.access"]
    assert record.fields["method"] == "HEAD"  # type: ignore[attr-defined]


def test_plain_access_lines_carry_their_fields() -> None:
    record = logging.LogRecord("transduce.access", logging.INFO, __file__, 1, "%s %s", ("translate", 200), None)
    record.fields = {"request_id": "r-1", "status": 200, "n_chars": 12, "queue_ms": None, "total_ms": 3.5}
    line = PlainFormatter("%(name)s: %(message)s").format(record)
    assert line == "transduce.access: translate 200 request_id=r-1 status=200 n_chars=12 total_ms=3.5"


async def test_the_grace_cut_off_is_logged_as_such(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serve(Slow(), max_items=1, shutdown_grace_s=0.3) as (client, app):
        task = asyncio.create_task(client.post("/translate_file", **a_file(20)))
        await asyncio.sleep(0.1)
        drain(app.state.transduce)
        started = time.monotonic()
        assert (await task).status_code == 503
        assert time.monotonic() - started < 2
    messages: list[Any] = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("shutdown grace of 0.3 s is over") for m in messages), messages
    assert not [m for m in messages if "within 0 s" in m or "within 0.0 s" in m], messages


async def test_detect_requests_are_logged_and_counted_apart(caplog: pytest.LogCaptureFixture) -> None:
    """A /detect request is one access line and counts in transduce_detect_requests, not among translate requests
    (the metrics probe of 2026-11-26 found it in neither)."""
    caplog.set_level(logging.INFO, logger="transduce.access")
    async with serve() as (client, _):
        before = (await client.get("/metrics")).text
        assert (await client.post("/detect", json={"q": "Good morning, how are you today?"})).status_code == 200
        assert (await client.post("/detect", json={"q": ""})).status_code == 400
        after = (await client.get("/metrics")).text
    for status in ("200", "400"):
        detects = [metric(text, "transduce_detect_requests_total", status=status) for text in (before, after)]
        translates = [metric(text, "transduce_requests_total", status=status) for text in (before, after)]
        assert detects[1] == detects[0] + 1 and translates[1] == translates[0]
    lines = [r.fields for r in caplog.records if r.name == "transduce.access"]  # type: ignore[attr-defined]
    assert [(f["path"], f["status"]) for f in lines] == [("/detect", 200), ("/detect", 400)]
