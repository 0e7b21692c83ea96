"""A bounded load test on loopback: 32 concurrent clients for a fixed time, zero errors, answers = alone answers."""

from __future__ import annotations

import asyncio
import os
import random
import time

import httpx

from tests.service.harness import live_server
from transduce.engine.options import SERVED_NO_REPEAT_NGRAM_SIZE, DecodeOptions
from transduce.engine.translator import Translator

CLIENTS = 32
SECONDS = float(os.environ.get("TRANSDUCE_LOAD_SECONDS", "20"))
SENTENCES = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "Tag",
    "The small blue dog runs to the green house and sees the water.",
    "Das Haus ist rot.",
]


def test_32_clients_zero_errors_and_consistent_answers(tiny_translator: Translator) -> None:
    expected = {
        s: r.hypotheses[0]
        for s, r in zip(
            SENTENCES,
            tiny_translator.translate(
                SENTENCES,
                source_lang="en",
                target_lang="de",
                options=DecodeOptions(no_repeat_ngram_size=SERVED_NO_REPEAT_NGRAM_SIZE),
            ),
            strict=True,
        )
    }
    errors: list[str] = []
    done = 0

    async def client(url: str, seed: int) -> None:
        nonlocal done
        rng = random.Random(seed)
        deadline = time.monotonic() + SECONDS
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while time.monotonic() < deadline:
                text = rng.choice(SENTENCES)
                r = await http.post("/translate", json={"q": text, "source": "en", "target": "de"})
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:100]}")
                elif r.json()["translatedText"] != expected[text]:
                    errors.append(f"mismatch for {text!r}")
                done += 1

    with live_server(tiny_translator, max_wait_ms=5.0) as url:
        started = time.monotonic()

        async def all_clients() -> None:
            await asyncio.wait_for(asyncio.gather(*(client(url, i) for i in range(CLIENTS))), SECONDS + 120)

        asyncio.run(all_clients())
        elapsed = time.monotonic() - started
        latency = httpx.get(url + "/latency").json()
    print(
        f"load: {done} requests from {CLIENTS} clients in {elapsed:.1f} s ({done / elapsed:.1f} req/s), "
        f"p50 {latency['total_ms']['p50']} ms, p99 {latency['total_ms']['p99']} ms, "
        f"mean batch {latency['batch_size']['mean']}"
    )
    assert not errors, errors[:5]
    assert done >= CLIENTS
    assert latency["batch_size"]["max"] > 1  # concurrent clients were batched together
