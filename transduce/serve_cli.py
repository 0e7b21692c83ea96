"""``transduce serve``: load the model (one-line error if it cannot), then run uvicorn with draining on SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

WRITE_MARGIN_S = 5.0  # uvicorn's wait beyond the drain's grace: time to write the 503s of what the grace cut off

if TYPE_CHECKING:
    import uvicorn
    from pydantic import ValidationError
    from starlette.types import ASGIApp

    from transduce.service.config import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the serve command; each overrides the TRANSDUCE_* environment variable of the same name."""
    from transduce.service.config import Settings

    def option(flag: str, field: str, text: str | None = None, **kwargs: Any) -> None:
        info = Settings.model_fields[field]
        default = text or f"default {info.default}"
        parser.add_argument(
            flag,
            dest=field,
            default=None,
            help=f"{info.description} (env TRANSDUCE_{field.upper()}; {default})",
            **kwargs,
        )

    option("--model", "model_dir", "default: the shipped model, exported to ONNX on first use")
    option("--models", "models", "default: none; SIGHUP rescans them")
    option("--memory-budget-mb", "memory_budget_mb", type=float)
    option("--host", "host")
    option("--port", "port", type=int)
    option("--device", "device", choices=["auto", "cpu", "cuda"])
    option("--strict-device", "strict_device", "default off", action="store_true")
    option("--max-batch-size", "max_batch_size", type=int)
    option("--max-wait-ms", "max_wait_ms", type=float)
    option("--api-keys", "api_keys", "default: none required")
    option("--root-path", "root_path", "default: none, served from /")
    option("--log-json", "log_json", "default on", action=argparse.BooleanOptionalAction)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening address now, so a port in use is reported before the model loads; OSError if it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on connections of a socket that says
    # it is TCP; with proto 0 every keep-alive response waited ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restarts need no wait
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _draining_server_class() -> type:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn re-raises SIGTERM after a graceful shutdown (exit -15); a drained shutdown here exits 0. The app's
        drain (``transduce.service.draining.drain``) starts with the shutdown, so the requests still running when the
        grace ends are answered 503 before uvicorn's own deadline (``server_config``) cancels them as 500s."""

        def __init__(
            self,
            config: uvicorn.Config,
            on_shutdown: Callable[[], object],
            fatal: Callable[[], str | None],
            keys: int = 0,
        ) -> None:
            super().__init__(config)
            self.on_shutdown, self.fatal, self.failed, self.keys = on_shutdown, fatal, False, keys

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            problem = self.fatal()
            if problem is not None:  # nothing can ever be served: one line and exit 1, not an unready server
                print(f"transduce serve: {problem}", file=sys.stderr)
                self.should_exit = self.failed = True
                return
            for sock in sockets or ():
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                logging.getLogger("transduce.service").info(
                    "listening on http://%s:%d; API keys: %s",
                    shown,
                    port,
                    f"required ({self.keys} configured)" if self.keys else "none, every client is served",
                )

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            self.on_shutdown()
            await super().shutdown(sockets)

    return DrainingServer


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from TRANSDUCE_* variables, with the flags that were given overriding them."""
    from transduce.service.config import Settings

    overrides = {k: v for k, v in vars(args).items() if v is not None and k in Settings.model_fields}
    return Settings(**overrides)


def settings_problem(exc: ValidationError | UnicodeDecodeError) -> str:
    """The one line saying why the settings could not be read: a ValidationError's first error, or a .env file that
    is not UTF-8 (pydantic-settings reads it as UTF-8: a traceback)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"{os.path.abspath('.env')} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8"
    first = exc.errors()[0]
    where = ".".join(map(str, first["loc"])) or "combination"
    message = first["msg"].removeprefix("Value error, ")  # pydantic's prefix of a validator's own message
    return f"invalid setting {where}: {message}"


def server_config(app: ASGIApp, settings: Settings, max_connections: int | None = None) -> uvicorn.Config:
    """uvicorn's configuration for ``app``: our logging, the drain grace and the connection limits of ``settings``
    (``max_connections`` overrides the setting: what fits the file-descriptor limit)."""
    import uvicorn

    from transduce.service.connections import ConnectionLimits, guarded_protocol

    limits = ConnectionLimits(max_connections or settings.max_connections, settings.request_read_timeout_s)
    return uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        # the app answers what is left 503 at the grace's end (DrainingServer): uvicorn waits a little longer
        timeout_graceful_shutdown=settings.shutdown_grace_s + WRITE_MARGIN_S,  # type: ignore[arg-type]
        lifespan="on",
        http=guarded_protocol(limits),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        backlog=settings.backlog,
        root_path=settings.root_path,  # behind a proxy that strips it: in the page's, /docs' and files' URLs
    )


def run(args: argparse.Namespace) -> int:
    """Validate settings, bind the port, resolve and load the model (or check the models directory: they load in the
    app's start-up), serve until SIGTERM/SIGINT; 0 after draining.

    Every failure before serving is one line on stderr: 2 for a bad setting, 1 for a port in use or no model."""
    from pydantic import ValidationError

    from transduce.engine.errors import ModelLoadError
    from transduce.service.logging import configure_logging
    from transduce.service.main import create_app, load_translator
    from transduce.service.pipeline import canary_problem
    from transduce.service.registry import model_paths
    from transduce.shipped import ModelUnavailableError, resolve_model_dir

    try:
        settings = settings_from_args(args)
    except (ValidationError, UnicodeDecodeError) as exc:
        print(f"transduce serve: {settings_problem(exc)}", file=sys.stderr)
        return 2
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        print(
            f"transduce serve: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    with sock, _hangups_ignored():  # until the app handles SIGHUP: loading a model must not die of it
        configure_logging(settings.log_json, throttle_s=settings.log_throttle_s)
        _log_environment(settings)
        if settings.models:  # several models: scanned, and the first loaded, in the app's start-up
            try:
                model_paths(settings.models)
            except ModelLoadError as exc:
                print(f"transduce serve: {exc}", file=sys.stderr)
                return 1
            return _serve(create_app(settings=settings, reload_on_sighup=True), settings, sock)
        try:
            model_dir = resolve_model_dir(settings.model_dir)
            translator = load_translator(settings.model_copy(update={"model_dir": str(model_dir)}))
        except ModelUnavailableError as exc:
            print(f"transduce serve: {exc}", file=sys.stderr)
            return 1
        except (ModelLoadError, ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a failed export
            print(f"transduce serve: cannot load the model: {exc}", file=sys.stderr)
            return 1
        if (problem := canary_problem(settings, translator)) is not None:
            print(f"transduce serve: invalid setting canary_text: {problem}", file=sys.stderr)
            return 2
        app = create_app(model_dir, settings, translator_factory=lambda _: translator, reload_on_sighup=True)
        return _serve(app, settings, sock)


# TRANSDUCE_* variables read elsewhere than Settings (the shipped model's export, the training data)
# (and TRANSDUCE_MODEL_DTYPE, docker compose's build argument)
ENVIRONMENT_ONLY = {"TRANSDUCE_SHARED_DATA", "TRANSDUCE_DEFAULT_CHECKPOINT", "TRANSDUCE_DEFAULT_EXPORT_DIR"}  # not .env
OTHER_VARIABLES = {
    "TRANSDUCE_SHARED_DATA",
    "TRANSDUCE_DEFAULT_CHECKPOINT",
    "TRANSDUCE_DEFAULT_EXPORT_DIR",
    "TRANSDUCE_MODEL_DTYPE",
    "TRANSDUCE_INT8_WEIGHT_BITS",
    "TRANSDUCE_HOST_PORT",  # docker-compose.yml's host port
}


def _log_environment(settings: Settings) -> None:
    """Warn of threads or replicas above the usable cores, and of TRANSDUCE_* variables that are no setting (a typo
    such as TRANSDUCE_API_KEY would otherwise leave a server open without a word; ``DrainingServer`` says whether
    keys are required once it serves)."""
    import difflib

    from transduce.engine.session import usable_cores
    from transduce.service.config import Settings

    log = logging.getLogger("transduce.service")
    cores = usable_cores()
    for name in ("intra_threads", "engine_replicas"):
        if getattr(settings, name) > cores:
            log.warning(
                "%s %d is over the %d cores this process may use: they queue on each other",
                name,
                getattr(settings, name),
                cores,
            )
    known = {f"TRANSDUCE_{name.upper()}" for name in Settings.model_fields} | OTHER_VARIABLES
    given = dict.fromkeys(os.environ, "")
    env_file = Settings.model_config.get("env_file")
    if isinstance(env_file, str) and os.path.isfile(env_file):  # (its typos were passed over without a word)
        from dotenv import dotenv_values

        given.update({name: f" in {os.path.abspath(env_file)}" for name in dotenv_values(env_file)})
    for name in sorted(n for n in given if n.upper().startswith("TRANSDUCE_") and n.upper() not in known):
        near = difflib.get_close_matches(name.upper(), sorted(known), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        log.warning("%s%s is not a setting, ignored%s", name, given[name], hint)
    for name in sorted(n for n in given if n.upper() in ENVIRONMENT_ONLY and n not in os.environ):
        log.warning("%s%s is read from the environment only, ignored (export it)", name, given[name])


@contextlib.contextmanager
def _hangups_ignored() -> Iterator[None]:
    """SIGHUP ignored (a closed terminal, `systemctl reload`: it stopped the server at once, dropping accepted
    requests), then put back as it was; once serving, the app rescans its models on it or logs it."""
    import signal

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def enable_crash_traces() -> None:
    """A fatal signal (a bus error when a served model's mapped weights file is truncated under the server, a crash
    in a native library) prints Python's "Fatal Python error" and where every thread was on stderr, instead of the
    process vanishing without a line in the log."""
    import faulthandler

    faulthandler.enable()


def _serve(app: ASGIApp, settings: Settings, sock: socket.socket) -> int:
    """Run ``app`` on the bound socket until SIGTERM/SIGINT; 0 after draining."""
    from transduce.service.connections import fd_headroom

    enable_crash_traces()

    from transduce.service.draining import drain

    DrainingServer = _draining_server_class()  # noqa: N806
    config = server_config(app, settings, fd_headroom(settings.max_connections))
    state = app.state.transduce  # type: ignore[attr-defined]
    server = DrainingServer(config, lambda: drain(state), lambda: state.fatal, len(settings.keys))
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:  # uvicorn exits when the app fails to start, for example
        return int(exc.code or 1)
    return 0 if server.started and not server.failed else 1
