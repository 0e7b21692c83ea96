"""``transduce health``: whether the server of these settings is ready (``GET /health/ready``), for a container's
health check: exit 0 when it is, 1 with one line saying why when not, 2 when the settings themselves are bad. It
reads what the server reads (``TRANSDUCE_*`` variables and ``.env``): the port, and the first API key of
``TRANSDUCE_API_KEYS`` or else of ``TRANSDUCE_API_KEYS_FILE``, which ``TRANSDUCE_PROTECT_HEALTH`` asks health
callers for. A server started with ``serve --port`` instead of ``TRANSDUCE_PORT`` is asked with ``--url``."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the health command."""
    parser.add_argument(
        "--url", default=None, help="the server's address (default: http://127.0.0.1:TRANSDUCE_PORT, the settings')"
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the answer (default 2)")


def run(args: argparse.Namespace) -> int:
    """Ask /health/ready once; 0 when it answers 200."""
    import logging

    import httpx
    from pydantic import ValidationError

    from transduce.serve_cli import settings_problem
    from transduce.server_url import bad_url
    from transduce.service.config import Settings

    if not 0 < args.timeout < float("inf"):
        print(f"transduce health: --timeout must be a number of seconds > 0, got {args.timeout}", file=sys.stderr)
        return 2
    if args.url is not None and (problem := bad_url("--url", args.url)) is not None:
        print(f"transduce health: {problem}", file=sys.stderr)  # (httpx's InvalidURL was a traceback)
        return 2
    try:
        settings = Settings()
    except (ValidationError, UnicodeDecodeError) as exc:
        print(f"transduce health: the server's settings are invalid: {settings_problem(exc)}", file=sys.stderr)
        return 2
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(settings.host, settings.host)  # (every address: loopback)
    host = f"[{host}]" if ":" in host else host
    url = (args.url or f"http://{host}:{settings.port}").rstrip("/") + "/health/ready"
    keys = list(settings.key_ring().limits)  # api_keys' in the order written, then the key file's
    headers = {"Authorization": f"Bearer {keys[0]}"} if keys else {}
    logging.getLogger("httpx").setLevel(logging.WARNING)  # (a line per request: a health check runs every 10 s)
    try:
        response = httpx.get(url, headers=headers, timeout=args.timeout)
    except httpx.HTTPError as exc:
        print(f"transduce health: cannot reach {url}: {type(exc).__name__}", file=sys.stderr)
        return 1
    if response.status_code != 200:
        try:
            body = response.json()
            reason = (body.get("error") or body.get("status")) if isinstance(body, dict) else None
        except ValueError:
            reason = None
        reason = reason or response.text[:200]  # (a JSON list or text from another server was a traceback)
        print(f"transduce health: {url} answered {response.status_code}: {reason}", file=sys.stderr)
        return 1
    return 0
