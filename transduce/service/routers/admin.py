"""POST /admin/reload: read the key file (TRANSDUCE_API_KEYS_FILE) again and rescan the model directories of
TRANSDUCE_MODELS, as SIGHUP does under `transduce serve`."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request

from transduce.engine.errors import ModelLoadError
from transduce.service.apikeys import KeyFileError, reload_keys
from transduce.service.deps import StateDep, charged_if_refused
from transduce.service.errors import ApiError
from transduce.service.schemas import ERROR_RESPONSES, ErrorResponse, ReloadReport

router = APIRouter(tags=["admin"])

RESPONSES: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorResponse, "description": "no admin key sent"},
    403: {"model": ErrorResponse, "description": "wrong admin key"},
    404: {"model": ErrorResponse, "description": "no admin key is configured (admin_key): there is no admin endpoint"},
    409: {
        "model": ErrorResponse,
        "description": "one model directory (model_dir) and no key file: nothing to reload; or a key file that "
        "cannot be used",
    },
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


@router.post("/admin/reload", response_model=ReloadReport, response_model_exclude_none=True, responses=RESPONSES)
async def reload(request: Request, state: StateDep) -> ReloadReport:
    """Read the key file again (keys added, revoked or re-limited take effect at once), then scan the model
    directories again: added models appear, removed ones stop being routed to and unload once idle, replaced ones
    serve new requests from their new version while earlier requests finish on the old one."""
    with charged_if_refused(state, request):  # a wrong admin key counts against its address (req_limit)
        check_admin_key(request, state.settings.admin_key)
    if state.pool is None and state.keyring.path is None:
        raise ApiError(
            409,
            "hot reload needs several models (TRANSDUCE_MODELS) or a key file (TRANSDUCE_API_KEYS_FILE): this server "
            "serves one model directory (TRANSDUCE_MODEL_DIR); restart it to change the model",
        )
    if state.draining or not state.ready:
        raise ApiError(503, "server is starting or shutting down", {"Retry-After": "5"})
    try:  # the keys first: a key file that cannot be used stops the reload before any model changes
        keys = reload_keys(state.keyring, state.limiter)
    except KeyFileError as exc:
        raise ApiError(409, f"nothing reloaded, the API keys read before stay: {exc}") from None
    if state.pool is None:
        return ReloadReport(api_keys=keys)
    try:
        return ReloadReport(**await state.pool.reload(), api_keys=keys)
    except ModelLoadError as exc:  # e.g. the models directory is gone: the models loaded go on serving
        done = " (the API keys were)" if keys is not None else ""
        raise ApiError(503, f"models not reloaded{done}: {exc}") from None
