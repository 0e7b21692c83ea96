"""Where transduce keeps what it rebuilds (exports, benchmark work): the user's cache, never the source tree."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/transduce``, else ``~/.cache/transduce``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transduce"
