"""JSON log lines (JsonFormatter) and configure_logging(), which `transduce serve` calls; nothing runs on import."""

from __future__ import annotations

import json
import logging
from typing import Any

ACCESS_LOGGER = "transduce.access"  # one line per POST /translate, fields in ``extra={"fields": {...}}``


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


def configure_logging(json_lines: bool, level: int = logging.INFO) -> None:
    """Log to stderr: JSON lines (production) or plain text; replaces the root logger's handlers."""
    handler = logging.StreamHandler()
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(JsonFormatter() if json_lines else plain)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
