"""Pure ASGI middleware: X-Request-ID on every response, and per-request metrics plus one JSON log line."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from transduce.service.errors import CLIENT_GONE
from transduce.service.logging import ACCESS_LOGGER
from transduce.service.state import AppState

access_log = logging.getLogger(ACCESS_LOGGER)
log = logging.getLogger("transduce.service")
INTERNAL_ERROR = json.dumps({"error": "internal error"}).encode()
_VALID_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
RECORDED_PATHS = ("/translate", "/translate_file")  # the requests counted in /metrics and logged, one line each
DETECT_PATH = "/detect"  # logged too, and counted apart (transduce_detect_requests): no translation is made
_LOGGED_PATHS = (*RECORDED_PATHS, DETECT_PATH)


def route_path(scope: Scope) -> str:
    """The path the app routes on: behind a proxy that strips ``root_path``, uvicorn puts it back in front."""
    path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
    return path[len(root) :] or "/" if root and path.startswith(root) else path


class HeadAsGetMiddleware:
    """Answer HEAD as GET without the body (RFC 9110), as LibreTranslate (Flask) does: uptime monitors and
    ``curl -I`` probe with it, and FastAPI's GET routes alone would answer 405."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Rewrite the method of a HEAD request and drop what the GET answer writes as its body."""
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET", "transduce.head": True}, receive, without_body)


class RequestContextMiddleware:
    """Echo (or create) X-Request-ID; turn an unexpected exception into a JSON 500; log one line per request to
    ``RECORDED_PATHS`` and to ``DETECT_PATH``."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap one HTTP exchange."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _VALID_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.monotonic()
        status = 500
        response_started = False
        translating = route_path(scope) in _LOGGED_PATHS
        if translating:  # (the idle release waits for these to end)
            self.state.translating += 1

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status, response_started = message["status"], True
                MutableHeaders(scope=message).append("X-Request-ID", request_id)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error on %s %s (request %s)", scope.get("method"), scope.get("path"), request_id)
            if response_started:
                raise  # nothing left to tell the client; the server closes the connection
            error_headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(INTERNAL_ERROR)).encode()),
            ]
            await send_with_id({"type": "http.response.start", "status": 500, "headers": error_headers})
            await send_with_id({"type": "http.response.body", "body": INTERNAL_ERROR})
        finally:
            if translating:
                self.state.translating -= 1
                if not 400 <= status < 500 or status == CLIENT_GONE:  # a refusal (401, 413, 422, 429...) did no work
                    self.state.last_translation = time.monotonic()
                self._record(scope, request_id, status, (time.monotonic() - started) * 1000)

    def _record(self, scope: Scope, request_id: str, status: int, total_ms: float) -> None:
        metrics = self.state.metrics
        if route_path(scope) == DETECT_PATH:
            metrics.detect_requests.labels(status=str(status)).inc()
        else:
            metrics.requests.labels(status=str(status)).inc()
            metrics.request_seconds.observe(total_ms / 1000)
        state: dict[str, Any] = scope.get("state", {})
        timing = state.get("timing")
        fields = {
            "request_id": request_id,
            "method": "HEAD" if scope.get("transduce.head") else scope.get("method"),
            "path": route_path(scope),
            "status": status,
            "n_items": None,
            "n_chars": None,
            **state.get("sizes", {}),
            "total_ms": round(total_ms, 2),
            "queue_ms": round(timing.queue_ms, 2) if timing else None,
            "inference_ms": round(timing.inference_ms, 2) if timing else None,
        }
        access_log.info("%s %s", str(fields["path"])[1:], status, extra={"fields": fields})


class JsonCORSMiddleware(CORSMiddleware):
    """Starlette's CORS middleware, with a refused preflight answered ``{"error": ...}`` (it answers plain text)."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        refused = bytes(response.body).decode().removeprefix("Disallowed CORS ")  # e.g. "origin, method"
        headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
        message = f"CORS preflight refused: {refused} not allowed (see cors_origins; the API takes GET and POST)"
        return JSONResponse({"error": message}, status_code=400, headers=headers)
