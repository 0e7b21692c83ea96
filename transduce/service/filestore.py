"""Translated files waiting to be downloaded: one folder per file under ``files_dir``, deleted after ``file_ttl_s``."""

from __future__ import annotations

import re
import shutil
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
        for folder in self.root.iterdir() if self.root.is_dir() else ():
            if _ID.fullmatch(folder.name) and folder.is_dir() and now - folder.stat().st_mtime > self.ttl_s:
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
        return gone
