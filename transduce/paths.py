"""Where transduce keeps what it rebuilds (exports, benchmark work): the user's cache, never the source tree; and
the checks every command runs before it writes an output, so that writing never destroys an input or a directory
that holds other files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/transduce``, else ``~/.cache/transduce``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transduce"


@contextmanager
def replacing_file(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (this process's own) to write; when the block ends without error it
    replaces ``path`` by rename, so a reader sees the old file or the whole new one; else it is removed, and an
    earlier ``path`` stays as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def resolved(path: str | Path, *, what: str) -> Path:
    """``path`` made absolute with its links followed; a symlink loop is a ValueError naming ``what`` and the path
    (Python 3.11 and 3.12 raise RuntimeError, which was a traceback)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:
        raise ValueError(f"{what} {path}: {exc}") from None


def check_output(out: str | Path, inputs: Iterable[str | Path | None], *, what: str = "the output") -> None:
    """ValueError when writing ``out`` would overwrite or delete one of ``inputs`` (None: not given): ``out`` is
    that input, or a directory holding it (a directory output replaces the whole directory)."""
    target = resolved(out, what=what)
    for given, path in [(given, resolved(given, what="the input")) for given in inputs if given is not None]:
        if path.is_relative_to(target):
            raise ValueError(f"{what} {out} would overwrite the input {given}: write it somewhere else")


def check_file_target(out: str | Path, *, what: str) -> None:
    """ValueError unless ``out`` can be a file's name: not a directory, in a directory that exists (checked before
    the work, not found after it: a table computed for minutes was lost to "[Errno 21] Is a directory")."""
    path = Path(out)
    parent = resolved(path, what=what).parent
    if path.is_dir() or not parent.is_dir():
        raise ValueError(f"{what} {out}: name a file in an existing directory")
    if not os.access(parent, os.W_OK):  # (a read-only file system was found only once the work was done)
        raise ValueError(f"{what} {out}: {parent} cannot be written")


def check_replaceable_dir(
    out: str | Path, marker: str, *, what: str, stamp: tuple[str, str] | None = None, hint: str = ""
) -> None:
    """ValueError unless directory ``out`` may be replaced as a whole: it does not exist, is empty, or is an earlier
    ``what``: it holds ``marker``, a JSON file whose ``stamp`` key has that value when ``stamp`` is given. A file
    there, or a directory of other files, is never deleted. ``hint`` follows the reason in the message."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{out} is a file, not a directory: name a new directory for the {what}")
    if path.is_dir() and not _stamped(path / marker, stamp) and any(path.iterdir()):
        raise ValueError(
            f"{out} holds files and is not an earlier {what} (its {marker} is missing or not one){hint}; writing "
            "there would delete them: name a new or empty directory"
        )


def _stamped(path: Path, stamp: tuple[str, str] | None) -> bool:
    if not path.is_file():
        return False
    if stamp is None:
        return True
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get(stamp[0]) == stamp[1]
