"""JSON log lines (JsonFormatter), the throttle for repeated resource errors (LogThrottle) and configure_logging(),
which `transduce serve` calls; nothing runs on import."""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

ACCESS_LOGGER = "transduce.access"  # one line per POST /translate, fields in ``extra={"fields": {...}}``
THROTTLE_KEY = "throttle"  # ``extra={"throttle": "some-kind"}`` puts a record under the LogThrottle
RESOURCE_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ENOSPC, errno.EDQUOT}
)  # out of descriptors, memory or disk
# what uvicorn logs for every malformed request: a client could fill the log with it
CLIENT_NOISE = frozenset({("uvicorn.error", "Invalid HTTP request received.")})
# loggers that warn once per malformed request body (the multipart parser Starlette uses: "Expected boundary ...")
CLIENT_NOISE_LOGGERS = ("python_multipart",)


class JsonFormatter(logging.Formatter):
    """One JSON object per log line; ``extra={"fields": {...}}`` adds structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render the record as JSON."""
        payload: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update(getattr(record, "fields", {}))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False, default=str)


class LogThrottle(logging.Filter):
    """Lets one record of a kind through per ``interval_s``, as one line, with the count of those held back.

    The kinds: an OSError that says the process is out of a resource (EMFILE "too many open files", ENFILE, ENOBUFS,
    ENOMEM; asyncio logs one with a traceback for every failed ``accept()``), keyed by logger and errno; uvicorn's
    warning for each malformed request (CLIENT_NOISE) and the multipart parser's for each malformed body
    (CLIENT_NOISE_LOGGERS); and any record logged with ``extra={"throttle": KIND}``.
    Every other record passes untouched."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s, self._clock = interval_s, clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a record of a kind let through less than ``interval_s`` ago."""
        kind = _kind(record)
        if kind is None:
            return True
        now = self._clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_s:
                self._held[kind] = self._held.get(kind, 0) + 1
                return False
            self._last[kind] = now
            held = self._held.pop(kind, 0)
        _to_one_line(record, held, self.interval_s)
        return True


def _kind(record: logging.LogRecord) -> str | None:
    given = getattr(record, THROTTLE_KEY, None)
    if given is not None:
        return f"{record.name}:{given}"
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
        return f"{record.name}:errno {exc.errno}"
    if (record.name, record.msg) in CLIENT_NOISE:
        return f"{record.name}:{record.msg}"
    root = record.name.partition(".")[0]
    return f"{root}:client noise" if root in CLIENT_NOISE_LOGGERS else None


def _to_one_line(record: logging.LogRecord, held: int, interval_s: float) -> None:
    lines = record.getMessage().splitlines()
    text = lines[0] if lines else ""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None:
        text += f": {type(exc).__name__}: {exc}"
    if held:
        text += f" ({held} more like it not logged in the last {interval_s:g} s)"
    else:
        text += f" (repeats are logged at most once per {interval_s:g} s)"
    record.msg, record.args = text, None
    record.exc_info, record.exc_text, record.stack_info = None, None, None


class PlainFormatter(logging.Formatter):
    """Plain text; a record's ``fields`` (an access line's request id, sizes, timings) follow as ``key=value``."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            text += "".join(f" {key}={value}" for key, value in fields.items() if value is not None)
        return text


def configure_logging(json_lines: bool, level: int = logging.INFO, throttle_s: float = 10.0) -> None:
    """Log to stderr: JSON lines (production) or plain text, resource errors throttled to one per ``throttle_s``;
    replaces the root logger's handlers."""
    handler = logging.StreamHandler()
    plain = PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(JsonFormatter() if json_lines else plain)
    handler.addFilter(LogThrottle(throttle_s))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
