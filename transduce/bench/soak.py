"""Soak run (minutes, not a test): steady load on `transduce serve`, resident memory sampled over time.

    python -m transduce.bench.soak --model DIR --minutes 10 --clients 16

Prints one line per sample (elapsed s, requests done, RSS MB) and a verdict: memory must level off, i.e. the
growth over the second half of the run stays under 5% of the RSS at half time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import time
from pathlib import Path

import httpx

from transduce.bench.load import serve

SENTENCES = [
    "Hello world.",
    "The weather is nice today.",
    "Please open the file and save your changes.",
    "In the beginning God created the heaven and the earth.",
    "Wie geht es dir?",
    "The quick brown fox jumps over the lazy dog, and then it runs into the forest to hide from the rain.",
]


def rss_mb(pid: int) -> float:
    """Resident set size of a process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def soak(url: str, pid: int, minutes: float, clients: int, every_s: float) -> list[tuple[float, int, float]]:
    """Drive the server until the time is up; sample RSS."""
    done = failed = 0
    stop = time.monotonic() + minutes * 60
    samples: list[tuple[float, int, float]] = []

    async def client(seed: int) -> None:
        nonlocal done, failed
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            while time.monotonic() < stop:
                n = rng.randint(1, 4)
                q = [rng.choice(SENTENCES) for _ in range(n)]
                source, target = rng.choice([("en", "de"), ("de", "en")])
                r = await http.post(
                    "/translate", json={"q": q, "source": source, "target": target, "beam_size": rng.choice([1, 4])}
                )
                failed += r.status_code != 200
                done += 1

    async def sampler() -> None:
        started = time.monotonic()
        while time.monotonic() < stop:
            samples.append((time.monotonic() - started, done, rss_mb(pid)))
            print(
                f"{samples[-1][0]:7.0f} s  {done:7d} requests ({failed} failed)  {samples[-1][2]:8.1f} MB RSS",
                flush=True,
            )
            await asyncio.sleep(every_s)

    await asyncio.gather(sampler(), *(client(i) for i in range(clients)))
    return samples


def main() -> int:
    """Run the soak and print the verdict."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="ONNX model directory")
    parser.add_argument("--minutes", type=float, default=10.0, help="duration")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    args = parser.parse_args()
    proc, url = serve(args.model, "step", threads=2)
    try:
        samples = asyncio.run(soak(url, proc.pid, args.minutes, args.clients, args.every))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    half = samples[len(samples) // 2][2]
    growth = samples[-1][2] - half
    ok = growth < 0.05 * half
    print(
        f"RSS at half time {half:.1f} MB, at the end {samples[-1][2]:.1f} MB: {'levels off' if ok else 'still growing'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
