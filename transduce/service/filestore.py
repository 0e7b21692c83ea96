"""Translated files waiting to be downloaded: one folder per file under ``files_dir``, deleted after ``file_ttl_s``."""

from __future__ import annotations

import re
import shutil
import time
import uuid
from pathlib import Path

_SAFE = re.compile(r"[^\w.-]+")  # \w: letters and digits of every script (and "_")
MAX_STEM = 150  # UTF-8 bytes of a stored name before its last two endings (".de.txt"): file systems allow 255 bytes
MAX_ENDINGS = 40


def safe_name(name: str) -> str:
    """``name`` as a file name we can store and serve: letters and digits of any script and ``._-``, anything else
    "_"; its stem cut to ``MAX_STEM`` bytes ("translation" when nothing of it is left), its last two endings (the
    target language, the type) kept."""
    stem, *endings = _SAFE.sub("_", name).rsplit(".", 2)
    stem = stem.strip("._").encode()[:MAX_STEM].decode(errors="ignore") or "translation"
    return stem + "".join(f".{ending}" for ending in endings if ending.strip("_"))[-MAX_ENDINGS:]


class FileStore:
    """Saves a file under a random id and finds it again until it expires."""

    def __init__(self, root: Path, ttl_s: float) -> None:
        self.root, self.ttl_s = root, ttl_s
        self.root.mkdir(parents=True, exist_ok=True)

    def save(self, name: str, data: bytes) -> tuple[str, str]:
        """Store ``data`` as ``safe_name(name)``; returns (id, that name). Nothing is left behind when it fails."""
        file_id, safe = uuid.uuid4().hex, safe_name(name)
        folder = self.root / file_id
        folder.mkdir()
        try:
            (folder / safe).write_bytes(data)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return file_id, safe

    def find(self, file_id: str, name: str) -> Path | None:
        """The stored file, or None when it never existed, expired, or the id/name are not ours."""
        if not re.fullmatch(r"[0-9a-f]{32}", file_id) or _SAFE.sub("_", name) != name:
            return None
        path = self.root / file_id / name
        if not path.is_file() or time.time() - path.stat().st_mtime > self.ttl_s:
            return None
        return path

    def purge(self) -> int:
        """Delete every file older than the time to live; returns how many went."""
        now, gone = time.time(), 0
        for folder in self.root.iterdir() if self.root.is_dir() else ():
            if folder.is_dir() and now - folder.stat().st_mtime > self.ttl_s:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        return gone
