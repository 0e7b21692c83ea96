"""``transduce serve``: load the model (one-line error if it cannot), then run uvicorn with draining on SIGTERM."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the serve command; each overrides the TRANSDUCE_* environment variable of the same name."""
    parser.add_argument("--model", dest="model_dir", default=None,
                        help="ONNX model directory (env TRANSDUCE_MODEL_DIR; default: the shipped model, exported "
                             "on first start)")
    parser.add_argument("--host", default=None, help="address to bind (env TRANSDUCE_HOST; default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (env TRANSDUCE_PORT; default 5000)")
    parser.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"],
                        help="execution device (env TRANSDUCE_DEVICE; default auto)")
    parser.add_argument("--strict-device", action="store_true", default=None,
                        help="exit instead of falling back to CPU when CUDA is unusable (env TRANSDUCE_STRICT_DEVICE)")
    parser.add_argument("--max-batch-size", type=int, default=None,
                        help="sentences per engine batch (env TRANSDUCE_MAX_BATCH_SIZE; default 32; 1 = no batching)")
    parser.add_argument("--max-wait-ms", type=float, default=None,
                        help="batching window in ms (env TRANSDUCE_MAX_WAIT_MS; default 5)")
    parser.add_argument("--api-keys", default=None, help="comma-separated API keys (env TRANSDUCE_API_KEYS; "
                                                         "default: none required)")
    parser.add_argument("--log-json", default=None, action=argparse.BooleanOptionalAction,
                        help="JSON log lines (env TRANSDUCE_LOG_JSON; default on)")


def _draining_server_class() -> type:
    import contextlib
    from collections.abc import Iterator

    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn re-raises SIGTERM after a graceful shutdown (exit -15); a drained shutdown here exits 0."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()

    return DrainingServer


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from TRANSDUCE_* variables, with the flags that were given overriding them."""
    from service.config import Settings

    overrides = {k: v for k, v in vars(args).items() if v is not None and k in Settings.model_fields}
    return Settings(**overrides)


def run(args: argparse.Namespace) -> int:
    """Validate settings, load the translator, serve until SIGTERM/SIGINT; exit 0 after draining."""
    import uvicorn
    from pydantic import ValidationError

    from engine.errors import ModelLoadError
    from service.logging import configure_logging
    from service.main import create_app, load_translator

    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "combination"
        print(f"transduce serve: invalid setting {where}: {first['msg']}", file=sys.stderr)
        return 2
    configure_logging(settings.log_json)
    try:
        translator = load_translator(settings)  # fail fast, with one line, before binding the port
    except (ModelLoadError, ValueError, OSError) as exc:
        print(f"transduce serve: cannot load the model: {exc}", file=sys.stderr)
        return 1
    app = create_app(settings, translator_factory=lambda _: translator)
    DrainingServer = _draining_server_class()  # noqa: N806
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=int(settings.shutdown_grace_s), lifespan="on")
    server = DrainingServer(config)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits on a port already in use, for example
        return int(exc.code or 1)
    return 0 if server.started else 1
