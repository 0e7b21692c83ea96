"""Dependencies as type aliases (``StateDep``, ``ProtectedDep``) so route signatures read like types."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request

from transduce.service.errors import ApiError
from transduce.service.pipeline import PipelineLike
from transduce.service.ratelimit import check_rate
from transduce.service.state import AppState


async def get_state(request: Request) -> AppState:
    """The app's state (a coroutine: FastAPI would run a plain function in its thread pool, a hand-off that cost a
    tenth of the event loop's time per cached /translate)."""
    state: AppState = request.app.state.transduce
    return state


StateDep = Annotated[AppState, Depends(get_state)]


def get_pipeline(state: StateDep) -> PipelineLike:
    """The pipeline, or 503 while starting up or once the queues have stopped. While draining it still serves the
    requests already accepted (uvicorn takes no new ones): a body still arriving, a file between its stages."""
    if state.stop_task is not None:
        raise ApiError(503, "server is shutting down", {"Retry-After": "5"})
    if state.pipeline is None or not (state.ready or state.draining):
        raise ApiError(503, "model is still loading", {"Retry-After": "2"})
    return state.pipeline


def check_api_key(state: AppState, request: Request, body_key: str | None = None) -> str | None:
    """401 without a key, 403 with a wrong one, when keys are configured; header ``Authorization: Bearer`` works too.
    The key it let the request in with (None when the server has no keys)."""
    if not state.keyring:
        return None
    key = body_key or request.query_params.get("api_key")
    auth = request.headers.get("authorization", "")
    if not key and auth.lower().startswith("bearer "):
        key = auth[7:].strip()
    if not key:
        raise ApiError(401, "an API key is required: pass api_key in the body or 'Authorization: Bearer KEY'")
    if state.keyring.match(key) is None:
        raise ApiError(403, "invalid API key")
    return key


def rate_before_body(state: AppState, request: Request) -> None:
    """Without API keys a client is its address (``req_limit``): counted before its body is read (a client over its
    limit made the server read and parse every body it sent, a file's up to max_file_bytes, to refuse it)."""
    if not state.keyring:
        check_rate(state.limiter, request)


@contextlib.contextmanager
def charged_if_refused(state: AppState, request: Request) -> Iterator[None]:
    """A key check: refused (401 or 403), the request counts against its address (``req_limit``), so guessing a key
    is limited wherever one is checked: a 429 once over."""
    try:
        yield
    except ApiError as exc:
        if exc.status in (401, 403):
            check_rate(state.limiter, request)
        raise


def accepted_key(state: AppState, request: Request, body_key: str | None = None) -> str | None:
    """``check_api_key``; with keys, the request then counted against its key (``req_limit``), and one refused for
    its key against its address: guessing keys is limited too (a 429 instead of the 401 or 403 once over)."""
    with charged_if_refused(state, request):
        key = check_api_key(state, request, body_key)
    if key is not None:
        check_rate(state.limiter, request, key, state.keyring.limit(key))
    return key


async def protected(request: Request, state: StateDep) -> None:
    """Guard for /health* and /metrics when protect_health is set."""
    if state.settings.protect_health:
        with charged_if_refused(state, request):  # (keys were guessed here as fast as a client liked)
            check_api_key(state, request)


ProtectedDep = Annotated[None, Depends(protected)]
