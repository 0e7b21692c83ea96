"""Where the project's shared data lives (the Bible chapter split and the dev sets): ``--shared-data DIR``, else the
environment variable ``TRANSDUCE_SHARED_DATA``, else ``shared/data`` beside the repository checkout."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TRANSDUCE_SHARED_DATA"
DEFAULT = Path(__file__).resolve().parents[3].parent / "shared" / "data"
SPLIT_NAME = "bible-split.json"
DEV_DIR = "dev"


def shared_dir(explicit: Path | str | None = None) -> Path:
    """The shared data folder: the explicit path, else $TRANSDUCE_SHARED_DATA, else the default (not checked)."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(ENV)
    return Path(env) if env else DEFAULT


def require(explicit: Path | str | None = None) -> Path:
    """The shared data folder, checked: ValueError (one line) when it or its Bible split / dev folder is missing."""
    root = shared_dir(explicit)
    missing = [p for p in (root / SPLIT_NAME, root / DEV_DIR) if not p.exists()]
    if missing:
        raise ValueError(
            f"shared data not found: {missing[0]} is missing (the Bible split and the dev sets are needed); "
            f"pass --shared-data DIR or set {ENV}"
        )
    return root


def split_file(explicit: Path | str | None = None) -> Path:
    """The Bible chapter split file (dev/test/holdout chapters)."""
    return shared_dir(explicit) / SPLIT_NAME
