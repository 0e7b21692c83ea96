"""GET /health (liveness) and GET /health/ready (model loaded and canary translated)."""

from __future__ import annotations

from fastapi import APIRouter

from transduce.service.deps import ProtectedDep, StateDep
from transduce.service.errors import ApiError
from transduce.service.schemas import ERROR_RESPONSES, Health

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, response_model_exclude_none=True)
async def health(_: ProtectedDep) -> Health:
    """The process is up and its event loop answers."""
    return Health(status="ok")


@router.get(
    "/health/ready", response_model=Health, response_model_exclude_none=True, responses={503: ERROR_RESPONSES[503]}
)
async def ready(state: StateDep, _: ProtectedDep) -> Health:
    """200 only after the model loaded and translated the canary; 503 while starting or shutting down."""
    if state.draining:
        raise ApiError(503, "shutting down")
    if not state.ready or state.pipeline is None:
        raise ApiError(503, "model is loading")
    translator = state.pipeline.translator
    return Health(status="ready", model=translator.model_name, provider=translator.provider)
