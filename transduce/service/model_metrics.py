"""Per-model Prometheus metrics of a server with several models (``TRANSDUCE_MODELS``), labelled ``model`` (the model
directory's name). The service-wide metrics (``transduce_requests_total``, ``transduce_queue_depth``, ...) keep their
names and meaning: they count every request and sum over the models."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from transduce.service.observability import LATENCY_BUCKETS

LOAD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STATES = ("unloaded", "loading", "ready", "failed", "retiring")  # retiring: removed by a reload, still in use


@dataclass(frozen=True)
class ModelGauge:
    """One model's live facts, read at scrape time."""

    model: str
    state: str
    memory_bytes: int
    in_flight: int
    queue_depth: int


class ModelMetrics:
    """Counters and histograms per model, and gauges read from the model pool when /metrics is scraped."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "transduce_model_requests",
            "Requests a model translated (each stage of a request through English counts for its model), by outcome",
            ["model", "outcome"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            "transduce_model_request_duration_seconds",
            "Time of a request (or of its stage) in one model's queue and engine",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.loads = Counter(
            "transduce_model_loads",
            "Model loads (with the canary), by outcome: ok, failed",
            ["model", "outcome"],
            registry=registry,
        )
        self.load_seconds = Histogram(
            "transduce_model_load_duration_seconds",
            "Time to load a model and translate its canary",
            ["model"],
            buckets=LOAD_BUCKETS,
            registry=registry,
        )
        self.evictions = Counter(
            "transduce_model_evictions",
            "Models unloaded, by reason: budget (least recently used over the memory budget), reload (removed or "
            "replaced)",
            ["model", "reason"],
            registry=registry,
        )
        self.pivots = Counter(
            "transduce_pivot_texts", "Texts translated through English (two models)", registry=registry
        )

    def request(self, model: str, seconds: float, ok: bool) -> None:
        """Record one request (or stage) on ``model``."""
        self.requests.labels(model=model, outcome="ok" if ok else "error").inc()
        self.request_seconds.labels(model=model).observe(seconds)

    def loaded(self, model: str, seconds: float, ok: bool) -> None:
        """Record one load attempt."""
        self.loads.labels(model=model, outcome="ok" if ok else "failed").inc()
        if ok:
            self.load_seconds.labels(model=model).observe(seconds)

    def evicted(self, model: str, reason: str) -> None:
        """Record one unload."""
        self.evictions.labels(model=model, reason=reason).inc()

    def bind(self, read: Callable[[], Iterable[ModelGauge]], budget_bytes: int) -> None:
        """Report every model's state, memory, requests in flight and queue depth from ``read()`` at scrape time."""
        self.registry.register(_Gauges(read, budget_bytes))


class _Gauges(Collector):
    def __init__(self, read: Callable[[], Iterable[ModelGauge]], budget_bytes: int) -> None:
        self.read, self.budget_bytes = read, budget_bytes

    def describe(self) -> Iterable[Metric]:
        return []  # read from live objects: nothing to check for name clashes up front

    def collect(self) -> Iterator[Metric]:
        models = list(self.read())
        state = GaugeMetricFamily(
            "transduce_model_state", "1 for the state each model is in", labels=["model", "state"]
        )
        memory = GaugeMetricFamily(
            "transduce_model_memory_bytes", "Resident memory a loaded model added when it loaded", labels=["model"]
        )
        in_flight = GaugeMetricFamily(
            "transduce_model_in_flight", "Requests using (or waiting for) a model", labels=["model"]
        )
        queue = GaugeMetricFamily(
            "transduce_model_queue_depth", "Sentences waiting in a model's queue", labels=["model"]
        )
        for m in models:
            for name in STATES:
                state.add_metric([m.model, name], 1.0 if m.state == name else 0.0)
            memory.add_metric([m.model], float(m.memory_bytes))
            in_flight.add_metric([m.model], float(m.in_flight))
            queue.add_metric([m.model], float(m.queue_depth))
        yield from (state, memory, in_flight, queue)
        yield GaugeMetricFamily(
            "transduce_models_memory_bytes",
            "Resident memory the loaded models added, in all",
            value=float(sum(m.memory_bytes for m in models)),
        )
        yield GaugeMetricFamily(
            "transduce_memory_budget_bytes",
            "The models' memory budget (0 = none)",
            value=float(self.budget_bytes),
        )
