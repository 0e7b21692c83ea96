"""Sources kept in public git repositories, read from a local copy the user names with ``--git NAME=PATH``.

PATH may be a bare mirror (``git clone --mirror`` / ``--bare``), a normal clone (files are read from its HEAD
commit, not from the work tree) or a plain folder with the repository's files. Nothing is downloaded here.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("transduce.data")


@dataclass(frozen=True)
class Known:
    """A repository the builder knows: where to clone it from and what is read from it."""

    url: str
    what: str


REPOS: dict[str, Known] = {
    "tatoeba": Known(
        "https://github.com/rioyshky/translation",
        "deu-eng.zip: Tatoeba English-German pairs (manythings.org export of 2018-05-13)",
    ),
    "multi30k": Known(
        "https://github.com/multi30k/dataset",
        "data/task1/raw: Multi30k task 1 train; the test splits are read only to keep them out of the corpus",
    ),
    **{
        f"wmt{y}": Known(
            f"https://github.com/wmt-conference/wmt{y}-news-systems",
            f"txt/: WMT 20{y} test sources, human references and system outputs (en-de, de-en)",
        )
        for y in (21, 22, 23, 24)
    },
    "opus-mt-train": Known(
        "https://github.com/Helsinki-NLP/OPUS-MT-train",
        "testsets/de-en/newstest2014-deen.*: reserved test set, read only to keep it out of the corpus",
    ),
}


def parse_git_options(values: Iterable[str] | None) -> dict[str, Path]:
    """``NAME=PATH`` strings -> {name: path}; ValueError (one line) for a bad form, unknown name or missing path."""
    out: dict[str, Path] = {}
    for value in values or ():
        name, sep, path = value.partition("=")
        name = name.strip()
        if not sep or not name or not path:
            raise ValueError(f"--git expects NAME=PATH, got {value!r}")
        if name not in REPOS:
            raise ValueError(f"--git: unknown repository name {name!r}; known: {', '.join(REPOS)}")
        if not Path(path).expanduser().is_dir():
            raise ValueError(f"--git {name}={path}: no such folder (clone it with: git clone {REPOS[name].url})")
        out[name] = Path(path).expanduser()
    return out


class Repo:
    """Read-only access to the files of one repository copy (git HEAD of a bare/normal repository, or a folder)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = Path(path).resolve()
        self.commit: str | None = None
        bare = self._text("rev-parse", "--is-bare-repository") == "true"
        top = None if bare else self._text("rev-parse", "--show-toplevel")
        # a folder inside some other repository (a plain download within a checkout) is read as a folder
        if bare or (top is not None and Path(top).resolve() == self.path):
            self.commit = self._text("rev-parse", "HEAD")

    def _text(self, *args: str) -> str | None:
        out = self._git(*args, check=False)
        return out.decode("utf-8", "replace").strip() if out is not None else None

    def _git(self, *args: str, check: bool = True) -> bytes | None:
        result = subprocess.run(
            ["git", "-c", f"safe.directory={self.path}", "-C", str(self.path), *args], capture_output=True
        )
        if result.returncode != 0:
            if check:
                log.warning(
                    "git %s in %s failed: %s", args[0], self.path, result.stderr.decode(errors="replace")[-200:]
                )
            return None
        return result.stdout

    @property
    def is_git(self) -> bool:
        return self.commit is not None

    def describe(self) -> str:
        """``PATH @ COMMIT`` (or ``PATH (folder)``) for the data card."""
        return f"{self.path} @ {self.commit}" if self.commit else f"{self.path} (folder, not a git repository)"

    def files(self, prefix: str = "") -> list[str]:
        """Paths of the files under ``prefix`` (a folder path like ``txt/``, or "" for all), sorted."""
        if self.is_git:
            out = self._git("ls-tree", "-r", "-z", "--name-only", "HEAD", "--", prefix or ".")
            names = out.decode("utf-8", "surrogateescape").split("\0") if out else []
            return sorted(n for n in names if n)
        root = self.path / prefix if prefix else self.path
        if not root.exists():
            return []
        return sorted(
            p.relative_to(self.path).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts
        )

    def read(self, path: str) -> bytes | None:
        """A file's bytes, or None when it is not there (or its content is missing from a partial mirror)."""
        if self.is_git:
            return self._git("cat-file", "blob", f"HEAD:{path}", check=False)
        file = self.path / path
        return file.read_bytes() if file.is_file() else None


def open_repos(paths: Mapping[str, Path]) -> dict[str, Repo]:
    """A Repo per ``--git`` entry."""
    return {name: Repo(name, path) for name, path in paths.items()}


def missing_reason(names: Iterable[str]) -> str:
    """Why a source is skipped: which ``--git`` options would provide it."""
    names = list(names)
    clones = "; ".join(f"git clone {REPOS[n].url}" for n in names)
    options = " or ".join(f"--git {n}=PATH" for n in names)
    return f"not given: {options} ({clones})"
