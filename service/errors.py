"""Every error leaves the service as {"error": "..."} with the right status; bad input never becomes a 500."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("transduce.service")


class ApiError(Exception):
    """An error with its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The LibreTranslate-style error body."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "invalid request: " + "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Map ApiError, validation errors, HTTP errors and anything unexpected to JSON error bodies."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error")
