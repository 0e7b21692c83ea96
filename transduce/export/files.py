"""Writing a directory so that readers see the old one or the complete new one, never a half-written one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing_dir(target: Path) -> Iterator[Path]:
    """Yield an empty directory beside ``target`` to fill; when the block ends without error it replaces ``target``.

    An exception leaves an existing ``target`` as it was and removes the partial work."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
        work = Path(tmp) / target.name
        work.mkdir()
        yield work
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
