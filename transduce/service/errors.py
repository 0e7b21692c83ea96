"""Every error leaves the service as {"error": "..."} with the right status; bad input never becomes a 500."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from transduce.engine.errors import (
    BatcherClosedError,
    DeadlineExceededError,
    InputTooLongError,
    QueueFullError,
    RequestTooLargeError,
    UnsupportedLanguageError,
)
from transduce.service.field_errors import validation_message

log = logging.getLogger("transduce.service")


CLIENT_GONE = 499  # the status of a request whose client hung up (nginx's), maybe after the engine began its work


class ApiError(Exception):
    """An error with its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The LibreTranslate-style error body."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _client_errors(request: Request, exc: Exception) -> tuple[int, str, dict[str, str]]:
    """Status, message and headers for the engine's and the batcher's exceptions."""
    state = request.app.state.transduce
    if isinstance(exc, UnsupportedLanguageError | InputTooLongError):
        return 400, str(exc), {}
    if isinstance(exc, RequestTooLargeError):
        return (
            413,
            (
                f"request has {exc.items} sentences, over the limit of {exc.limit} sentences per request "
                "(max_queue_items); send it in parts"
            ),
            {},
        )
    if isinstance(exc, QueueFullError):
        retry = state.pipeline.retry_after() if state.pipeline is not None else 1
        return 503, "server busy: the translation queue is full, retry later", {"Retry-After": str(retry)}
    if isinstance(exc, DeadlineExceededError):
        limit = state.settings.request_timeout_s
        return 504, f"translation did not finish within {limit:g} s (request_timeout_s)", {}
    return 503, "server is shutting down", {"Retry-After": "5"}  # BatcherClosedError


CLIENT_ERRORS = (
    UnsupportedLanguageError,
    InputTooLongError,
    RequestTooLargeError,
    QueueFullError,
    DeadlineExceededError,
    BatcherClosedError,
)


def install_error_handlers(app: FastAPI) -> None:
    """Map ApiError, the engine's errors, validation errors, HTTP errors and anything unexpected to JSON bodies."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.headers)

    async def _client_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(*_client_errors(request, exc))

    for exc_type in CLIENT_ERRORS:
        app.add_exception_handler(exc_type, _client_error)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, validation_message(exc.errors()))

    @app.exception_handler(ClientDisconnect)
    async def _gone(_: Request, __: ClientDisconnect) -> JSONResponse:  # nobody reads it: counted and logged as 499
        return error_response(CLIENT_GONE, "client closed the connection")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message, root = str(exc.detail), str(request.scope.get("root_path", ""))
        if exc.status_code == 404 and root and f"{request.scope.get('path', '')}/".startswith(f"{root}{root}/"):
            # uvicorn put root_path in front of a path that still had it: the proxy passed the prefix on
            message = (
                f"{message}: this server is served under root_path {root}, which the proxy in front of it strips; "
                f"this request still had it (strip it at the proxy, or unset TRANSDUCE_ROOT_PATH)"
            )
        return error_response(exc.status_code, message, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error")
