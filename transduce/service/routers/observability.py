"""GET /latency (rolling percentiles as JSON) and GET /metrics (Prometheus exposition)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from transduce.service.deps import ProtectedDep, StateDep

router = APIRouter(tags=["observability"])


@router.get("/latency")
async def latency(state: StateDep, _: ProtectedDep) -> dict[str, Any]:
    """p50/p90/p99/max of total, queue-wait and inference ms over the last requests, and batch sizes."""
    summary = state.window.summary()
    if state.pipeline is not None:
        summary.update(state.pipeline.status())
    return summary


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(state: StateDep, _: ProtectedDep) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
