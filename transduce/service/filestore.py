"""Translated files waiting to be downloaded: one folder per file under ``files_dir``, deleted after ``file_ttl_s``;
at most ``max_stored_bytes`` and ``max_stored_files`` of them (this server's) at once."""

from __future__ import annotations

import errno
import math
import re
import shutil
import threading
import time
import unicodedata
import uuid
from pathlib import Path

_ID = re.compile(r"[0-9a-f]{32}")  # a stored file's folder: uuid4().hex
MAX_STEM = 150  # UTF-8 bytes of a stored name before its last two endings (".de.txt"): file systems allow 255 bytes
MAX_ENDINGS = 40


def _kept(c: str) -> bool:
    """A letter or digit of any script, a combining mark (Devanagari vowel signs, NFD accents), or ``._-``."""
    return c.isalnum() or c in "._-" or unicodedata.category(c)[0] == "M"


def safe_chars(name: str) -> str:
    """``name`` in NFC (as macOS's decomposed names are not) with each run of other characters as one "_"."""
    out: list[str] = []
    for c in unicodedata.normalize("NFC", name):
        if _kept(c):
            out.append(c)
        elif not out or out[-1] != "_":
            out.append("_")
    return "".join(out)


def ascii_name(name: str) -> str:
    """``name`` spelled in ASCII ("Résumé.de.txt" -> "Resume.de.txt"), for clients that do not read RFC 6266's
    ``filename*``; "translation" and its endings when no letter of it has an ASCII spelling."""
    spelled = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    stem, _, rest = safe_chars(spelled).partition(".")
    return f"{stem.strip('_') or 'translation'}.{rest}" if rest else stem.strip("_") or "translation"


def safe_name(name: str) -> str:
    """``name`` as a file name we can store and serve: letters and digits of any script and ``._-``, anything else
    "_"; its stem cut to ``MAX_STEM`` bytes ("translation" when nothing of it is left), its last two endings (the
    target language, the type) kept."""
    stem, *endings = safe_chars(name).rsplit(".", 2)
    stem = stem.strip("._").encode()[:MAX_STEM].decode(errors="ignore") or "translation"
    return stem + "".join(f".{ending}" for ending in endings if ending.strip("_"))[-MAX_ENDINGS:]


class StoreFullError(Exception):
    """No room for another translated file (the store's limits, or the disk); ``retry_after``: seconds until the
    oldest stored file expires and frees its room; 0 when waiting cannot help (the file alone is over the limit)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says the disk or the user's quota is full."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _DISK_FULL:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class FileStore:
    """Saves a file under a random id and finds it again until it expires. Counts the bytes and files it saved that
    have not expired: one more that would take them past ``max_bytes`` or ``max_files`` (0: no limit) is refused
    (``StoreFullError``), before the translation when the upload's size already would (``check_room``)."""

    def __init__(self, root: Path, ttl_s: float, *, max_bytes: int = 0, max_files: int = 0) -> None:
        self.root, self.ttl_s, self.max_bytes, self.max_files = root, ttl_s, max_bytes, max_files
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # saves run in threads
        self._saved: dict[str, tuple[int, float]] = {}  # id -> (bytes, when saved), this store's unexpired files

    def _live(self, now: float) -> list[tuple[int, float]]:
        """The saved files not expired, the expired ones forgotten (``purge`` deletes them). Under the lock."""
        for file_id in [i for i, (_, at) in self._saved.items() if now - at > self.ttl_s]:
            del self._saved[file_id]
        return list(self._saved.values())

    def _room(self, size: int, now: float) -> None:
        """StoreFullError when ``size`` more bytes (one more file) would not fit. Under the lock."""
        if self.max_bytes and size > self.max_bytes:
            raise StoreFullError(
                f"a file of {size} bytes is more than the server keeps for downloads ({self.max_bytes} bytes, "
                "max_stored_bytes): split it",
                0,
            )
        live = self._live(now)
        over_bytes = self.max_bytes and sum(b for b, _ in live) + size > self.max_bytes
        over_files = self.max_files and len(live) + 1 > self.max_files
        if not (over_bytes or over_files):
            return
        retry = max(1, math.ceil(min((at for _, at in live), default=now) + self.ttl_s - now))
        what = f"{self.max_bytes} bytes (max_stored_bytes)" if over_bytes else f"{self.max_files} (max_stored_files)"
        raise StoreFullError(
            f"server busy: translated files waiting to be downloaded fill the store's {what}; retry in {retry} s",
            retry,
        )

    def check_room(self, size: int) -> None:
        """StoreFullError now when a file of ``size`` bytes would not fit (before the work of making it)."""
        with self._lock:
            self._room(size, time.time())

    def save(self, name: str, data: bytes) -> tuple[str, str]:
        """Store ``data`` as ``safe_name(name)``; returns (id, that name). Nothing is left behind when it fails;
        StoreFullError when it does not fit the limits or the disk is full."""
        file_id, safe = uuid.uuid4().hex, safe_name(name)
        with self._lock:
            now = time.time()
            self._room(len(data), now)
            self._saved[file_id] = (len(data), now)  # its room, taken before it is written
        folder = self.root / file_id
        try:
            folder.mkdir()
            (folder / safe).write_bytes(data)
        except BaseException as exc:
            shutil.rmtree(folder, ignore_errors=True)
            with self._lock:
                self._saved.pop(file_id, None)
            if disk_full(exc):
                raise StoreFullError("no disk space left for the translated file: retry later", 60) from None
            raise
        return file_id, safe

    def find(self, file_id: str, name: str) -> Path | None:
        """The stored file, or None when it never existed, expired, or the id/name are not ours."""
        if not _ID.fullmatch(file_id) or safe_chars(name) != name:
            return None
        path = self.root / file_id / name
        if not path.is_file() or time.time() - path.stat().st_mtime > self.ttl_s:
            return None
        return path

    def purge(self) -> int:
        """Delete every stored file older than the time to live; returns how many went. Only the store's own
        folders (named by ``save``'s ids) are touched: ``files_dir`` may be a directory others use too."""
        now, gone = time.time(), 0
        with self._lock:
            self._live(now)
        for folder in self.root.iterdir() if self.root.is_dir() else ():
            try:  # (another server sharing files_dir, or a failed save, may delete it meanwhile)
                expired = _ID.fullmatch(folder.name) and folder.is_dir() and now - folder.stat().st_mtime > self.ttl_s
            except FileNotFoundError:
                continue
            if expired:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        return gone
