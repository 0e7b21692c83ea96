"""GET /health (liveness) and GET /health/ready (model loaded and canary translated; with several models, each
model's state)."""

from __future__ import annotations

from fastapi import APIRouter

from transduce.service.deps import ProtectedDep, StateDep
from transduce.service.errors import ApiError
from transduce.service.schemas import ERROR_RESPONSES, Health, ModelHealth

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, response_model_exclude_none=True)
async def health(_: ProtectedDep) -> Health:
    """The process is up and its event loop answers."""
    return Health(status="ok")


@router.get(
    "/health/ready", response_model=Health, response_model_exclude_none=True, responses={503: ERROR_RESPONSES[503]}
)
async def ready(state: StateDep, _: ProtectedDep) -> Health:
    """200 only after the model loaded and translated the canary; 503 while starting or shutting down.

    With several models: 200 once they were scanned and the first one loaded, while at least one is not failed (a
    model that is not loaded loads on first use); ``models`` gives each one's state (unloaded, loading, ready,
    failed with its reason), memory and load time."""
    if state.draining:
        raise ApiError(503, "shutting down")
    if not state.ready or state.pipeline is None:
        raise ApiError(503, "model is loading")
    translator = state.pipeline.translator
    if state.pool is None:
        return Health(status="ready", model=translator.model_name, provider=translator.provider)
    problem = state.pool.readiness()
    if problem is not None:
        raise ApiError(503, problem)
    models = [ModelHealth(**entry) for entry in state.pool.health()]
    return Health(status="ready", model=translator.model_name, provider=translator.provider, models=models)
