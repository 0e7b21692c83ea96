"""Checking a server's address given on the command line (``transduce translate --url``, ``transduce health --url``)
before anything is sent: one line and exit status 2 for a bad one, never the HTTP library's traceback."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

EXAMPLE = "http://127.0.0.1:5000"


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a server's address ("" when it is none at all: no http:// or https://), or None."""
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", url, re.IGNORECASE):
        return ""
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is not a number, or over 65535: ValueError
    except ValueError:
        return "its host or port cannot be read"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 is no server's"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "the requests' paths are added to it: it takes no ?query or #fragment"
    return None


def bad_url(flag: str, url: str) -> str | None:
    """The message for a bad ``url`` given as ``flag`` (without the command's name), or None when it is good."""
    problem = url_problem(url)
    if problem is None:
        return None
    why = f" ({problem})" if problem else ""
    return f"{flag} must be a server's http:// or https:// address, e.g. {EXAMPLE}, got {url!r}{why}"
