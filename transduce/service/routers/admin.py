"""POST /admin/reload: rescan the model directories of TRANSDUCE_MODELS (as SIGHUP does under `transduce serve`)."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request

from transduce.engine.errors import ModelLoadError
from transduce.service.deps import StateDep, charged_if_refused
from transduce.service.errors import ApiError
from transduce.service.schemas import ERROR_RESPONSES, ErrorResponse, ReloadReport

router = APIRouter(tags=["admin"])

RESPONSES: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorResponse, "description": "no admin key sent"},
    403: {"model": ErrorResponse, "description": "wrong admin key"},
    404: {"model": ErrorResponse, "description": "no admin key is configured (admin_key): there is no admin endpoint"},
    409: {"model": ErrorResponse, "description": "the server serves one model directory (model_dir): nothing to scan"},
    503: ERROR_RESPONSES[503],
}


def check_admin_key(request: Request, key: str) -> None:
    """404 without a configured admin key (the endpoint does not exist), 401 without a key, 403 with a wrong one.

    The key comes as ``Authorization: Bearer KEY`` or ``X-Admin-Key: KEY`` (never in the URL, where logs keep it)."""
    if not key:
        raise ApiError(404, "Not Found")
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-admin-key", "")
    if not given:
        raise ApiError(401, "the admin key is required: send 'Authorization: Bearer KEY' or 'X-Admin-Key: KEY'")
    if not hmac.compare_digest(given.encode(), key.encode()):
        raise ApiError(403, "invalid admin key")


@router.post("/admin/reload", response_model=ReloadReport, responses=RESPONSES)
async def reload(request: Request, state: StateDep) -> ReloadReport:
    """Scan the model directories again: added models appear, removed ones stop being routed to and unload once
    idle, replaced ones serve new requests from their new version while earlier requests finish on the old one."""
    with charged_if_refused(state, request):  # a wrong admin key counts against its address (req_limit)
        check_admin_key(request, state.settings.admin_key)
    if state.pool is None:
        raise ApiError(
            409,
            "hot reload needs several models (TRANSDUCE_MODELS): this server serves one model directory "
            "(TRANSDUCE_MODEL_DIR); restart it to change the model",
        )
    if state.draining or not state.ready:
        raise ApiError(503, "server is starting or shutting down", {"Retry-After": "5"})
    try:
        return ReloadReport(**await state.pool.reload())
    except ModelLoadError as exc:  # e.g. the models directory is gone: the models loaded go on serving
        raise ApiError(503, f"models not reloaded: {exc}") from None
