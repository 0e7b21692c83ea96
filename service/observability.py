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

from engine.batcher import BatchStats
from service.logging import JsonFormatter, configure_logging

__all__ = ["JsonFormatter", "LatencyWindow", "Metrics", "RequestTiming", "configure_logging"]  # logging re-exported

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The service's Prometheus metrics, in a registry of its own (several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("transduce_requests", "Translate requests by HTTP status", ["status"], registry=r)
        self.request_seconds = Histogram("transduce_request_duration_seconds", "Total time of a translate request",
                                         buckets=LATENCY_BUCKETS, registry=r)
        self.queue_seconds = Histogram("transduce_queue_wait_seconds", "Time a sentence waited for its batch",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.inference_seconds = Histogram("transduce_inference_seconds", "Engine time of one batch",
                                           buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("transduce_batch_size", "Sentences per engine batch",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.batch_failures = Counter("transduce_batch_failures", "Engine batches that raised", registry=r)
        self.sentences = Counter("transduce_sentences", "Sentences translated", registry=r)
        self.generated_tokens = Counter("transduce_generated_tokens", "Target tokens generated", registry=r)
        self.characters = Counter("transduce_characters", "Source characters received", registry=r)
        self.queue_depth = Gauge("transduce_queue_depth", "Sentences waiting for a batch", registry=r)
        self.padding_ratio = Gauge("transduce_padding_ratio",
                                   "Share of padded source positions in engine batches (lower is better)", registry=r)

    def bind(self, queue_depth: Callable[[], float], padding_ratio: Callable[[], float]) -> None:
        """Read the two gauges from live objects at scrape time."""
        self.queue_depth.set_function(queue_depth)
        self.padding_ratio.set_function(padding_ratio)


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
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3),
            "max": round(float(max(values)), 3)}


class LatencyWindow:
    """The last ``size`` requests and batches, summarised for GET /latency; also feeds Retry-After."""

    def __init__(self, size: int = 1000) -> None:
        self.requests: deque[RequestTiming] = deque(maxlen=size)
        self.batches: deque[tuple[float, int, float]] = deque(maxlen=size)  # (finished_at, size, inference_ms)
        self.lock = threading.Lock()

    def add_request(self, timing: RequestTiming) -> None:
        """Record one finished request."""
        with self.lock:
            self.requests.append(timing)

    def add_batch(self, stats: BatchStats) -> None:
        """Record one engine batch."""
        with self.lock:
            self.batches.append((time.monotonic(), stats.size, stats.inference_ms))

    def items_per_second(self, horizon_s: float = 30.0) -> float:
        """Recent engine throughput in sentences per second (0 when idle)."""
        now = time.monotonic()
        with self.lock:
            recent = [(size, ms) for t, size, ms in self.batches if now - t <= horizon_s]
        busy_s = sum(ms for _, ms in recent) / 1000
        return sum(size for size, _ in recent) / busy_s if busy_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """JSON body of GET /latency."""
        with self.lock:
            reqs, batches = list(self.requests), list(self.batches)
        sizes = [size for _, size, _ in batches]
        return {
            "window": self.requests.maxlen,
            "count": len(reqs),
            "total_ms": _percentiles([r.total_ms for r in reqs]),
            "queue_ms": _percentiles([r.queue_ms for r in reqs]),
            "inference_ms": _percentiles([r.inference_ms for r in reqs]),
            "batches": len(batches),
            "batch_size": {"mean": round(float(np.mean(sizes)), 3) if sizes else 0.0,
                           "max": max(sizes) if sizes else 0},
        }
