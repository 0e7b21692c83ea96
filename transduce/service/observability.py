"""Prometheus metrics (a registry per app) and the rolling /latency window."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The service's Prometheus metrics, in a registry of its own (several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("transduce_requests", "Translate requests by HTTP status", ["status"], registry=r)
        self.detect_requests = Counter(
            "transduce_detect_requests",
            "Language detection requests (POST /detect) by HTTP status",
            ["status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "transduce_request_duration_seconds",
            "Total time of a translate request",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_seconds = Histogram(
            "transduce_queue_wait_seconds",
            "Time a sentence waited for its batch (step scheduler: to join the running batch)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inference_seconds = Histogram(
            "transduce_inference_seconds",
            "Engine time of one batch (step scheduler: of one decoder step of the running batch)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "transduce_batch_size",
            "Sentences per engine batch (step scheduler: decoding in one step)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.batch_failures = Counter("transduce_batch_failures", "Engine batches that raised", registry=r)
        self.sentences = Counter("transduce_sentences", "Sentences translated by the engine", registry=r)
        self.cache_hits = Counter("transduce_cache_hits", "Sentences answered from the translation cache", registry=r)
        self.cache_misses = Counter("transduce_cache_misses", "Sentences the cache did not have", registry=r)
        self.generated_tokens = Counter("transduce_generated_tokens", "Target tokens generated", registry=r)
        self.characters = Counter(
            "transduce_characters", "Source characters of the requests translated (answered 200)", registry=r
        )
        self.queue_depth = Gauge("transduce_queue_depth", "Sentences waiting for a batch", registry=r)
        self.padding_ratio = Gauge(
            "transduce_padding_ratio",
            "Share of padded source positions in engine batches (lower is better)",
            registry=r,
        )
        self.cache_entries = Gauge("transduce_cache_entries", "Sentence translations in the cache", registry=r)
        self.cache_hit_ratio = Gauge(
            "transduce_cache_hit_ratio", "Share of cache lookups answered from the cache since start", registry=r
        )

    def bind(
        self,
        queue_depth: Callable[[], float],
        padding_ratio: Callable[[], float],
        cache_entries: Callable[[], float],
        cache_hit_ratio: Callable[[], float],
    ) -> None:
        """Read the gauges from live objects at scrape time."""
        self.queue_depth.set_function(queue_depth)
        self.padding_ratio.set_function(padding_ratio)
        self.cache_entries.set_function(cache_entries)
        self.cache_hit_ratio.set_function(cache_hit_ratio)


@dataclass(frozen=True)
class RequestTiming:
    """Where one request's time went."""

    total_ms: float
    queue_ms: float
    inference_ms: float


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "p50": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "max": round(float(max(values)), 3),
    }


class LatencyWindow:
    """The last ``size`` requests and engine calls (static batches, or steps of the running batch), summarised for
    GET /latency; also feeds Retry-After."""

    def __init__(self, size: int = 1000) -> None:
        self.requests: deque[RequestTiming] = deque(maxlen=size)
        # (finished_at, sentences in the call, milliseconds, sentences it finished)
        self.batches: deque[tuple[float, int, float, int]] = deque(maxlen=size)
        self.lock = threading.Lock()

    def add_request(self, timing: RequestTiming) -> None:
        """Record one finished request."""
        with self.lock:
            self.requests.append(timing)

    def add_batch(self, size: int, ms: float, finished: int) -> None:
        """Record one engine call: a static batch (finished == size) or one step of the running batch."""
        with self.lock:
            self.batches.append((time.monotonic(), size, ms, finished))

    def items_per_second(self, horizon_s: float = 30.0) -> float:
        """Recent engine throughput in sentences per second (0 when idle)."""
        now = time.monotonic()
        with self.lock:
            recent = [(done, ms) for t, _, ms, done in self.batches if now - t <= horizon_s]
        busy_s = sum(ms for _, ms in recent) / 1000
        return sum(done for done, _ in recent) / busy_s if busy_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """JSON body of GET /latency."""
        with self.lock:
            reqs, batches = list(self.requests), list(self.batches)
        sizes = [size for _, size, _, _ in batches]
        return {
            "window": self.requests.maxlen,
            "count": len(reqs),
            "total_ms": _percentiles([r.total_ms for r in reqs]),
            "queue_ms": _percentiles([r.queue_ms for r in reqs]),
            "inference_ms": _percentiles([r.inference_ms for r in reqs]),
            "batches": len(batches),
            "batch_size": {
                "mean": round(float(np.mean(sizes)), 3) if sizes else 0.0,
                "max": max(sizes) if sizes else 0,
            },
        }
