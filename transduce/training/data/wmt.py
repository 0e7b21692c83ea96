"""WMT 2021-2024 general/news test sets (research use) from the repositories wmt-conference/wmt2{1,2,3,4}-news-systems:
``txt/sources``, ``txt/references`` and ``txt/system-outputs``, line-aligned per test set and direction.

Both directions are read. Each pair keeps the original text (the test set's source side: English for en-de, German
for de-en) as its ``group``, so all translations of one original land in the same held-out slice. Human references
give origin ``wmt``; system outputs (online, research and LLM systems) give origin ``wmt-sys`` and are synthetic
targets, to be weighted below human text. WMT 2024's canary line is never read out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair, normalize, split_lines
from transduce.training.data.gitrepo import Repo

YEARS = ("wmt21", "wmt22", "wmt23", "wmt24")
ROLES = {"sources": "source", "references": "reference", "system-outputs": "system"}
_DIRECTION = re.compile(r"(?<![a-z])(en-de|de-en)(?![a-z])")
_CANARY = "CANARY GUID"


@dataclass(frozen=True)
class TextFile:
    """One file of a WMT repository's txt/ folder."""

    path: str
    role: str  # source | reference | system
    direction: str  # en-de | de-en
    test: str  # what precedes the direction in the file name ("newstest2021." or "" for WMT 2024)
    name: str  # what follows it: ".ref.A.de", ".hyp.Online-A.de", "/ONLINE-A.txt"


def classify(path: str) -> TextFile | None:
    """A txt/ file's role, direction and test set; None for other files and language pairs."""
    parts = path.split("/", 2)
    if len(parts) < 3 or parts[0] != "txt" or parts[1] not in ROLES:
        return None
    match = _DIRECTION.search(parts[2])
    if match is None:
        return None
    rest = parts[2]
    return TextFile(path, ROLES[parts[1]], match.group(1), rest[: match.start()], rest[match.end() :])


def system_name(file: TextFile) -> str:
    """``Online-A`` from ``.hyp.Online-A.de`` or ``/Online-A.txt``."""
    name = file.name.strip("./")
    name = re.sub(r"^hyp\.", "", name)
    return re.sub(r"\.(en|de|txt)$", "", name)


def aligned(repo: Repo, meta: dict[str, Any], role: str) -> Iterator[tuple[TextFile, list[str], list[str]]]:
    """(file, source lines, file lines) for every file of ``role`` whose line count matches its source's."""
    files = [f for f in (classify(p) for p in repo.files("txt/")) if f is not None]
    sources = {(f.test, f.direction): f for f in files if f.role == "source"}
    cache: dict[str, list[str] | None] = {}

    def read_lines(path: str) -> list[str] | None:
        if path not in cache:
            data = repo.read(path)
            cache[path] = split_lines(data.decode("utf-8", "replace")) if data is not None else None
        return cache[path]

    for f in sorted((f for f in files if f.role == role), key=lambda f: f.path):
        src = sources.get((f.test, f.direction))
        src_lines = read_lines(src.path) if src is not None else None
        lines = read_lines(f.path)
        if src_lines is None or lines is None:
            meta.setdefault("unreadable", []).append(f.path)
        elif len(lines) != len(src_lines):
            meta.setdefault("misaligned", []).append(f"{f.path} ({len(lines)} lines, source {len(src_lines)})")
        else:
            yield f, src_lines, lines


def _pairs(repos: Mapping[str, Repo], meta: dict[str, Any], role: str, origin: str) -> Iterator[Pair]:
    meta["repositories"] = {y: repos[y].describe() for y in YEARS if y in repos}
    missing = [y for y in YEARS if y not in repos]
    if missing:
        meta["years_missing"] = missing
    files: dict[str, int] = {}
    canary = 0
    for year in YEARS:
        if year not in repos:
            continue
        for f, src_lines, lines in aligned(repos[year], meta, role):
            files[f"{year}:{f.path}"] = len(lines)
            for src, tgt in zip(src_lines, lines, strict=True):
                if _CANARY in src or _CANARY in tgt:
                    canary += 1
                    continue
                en, de = (src, tgt) if f.direction == "en-de" else (tgt, src)
                yield Pair(origin, en, de, group=normalize(src))
    meta["files"] = files
    if role == "system":
        meta["systems"] = len(files)
    meta["canary_lines_skipped"] = canary
    meta["original_side"] = "the test set's source: English for en-de files, German for de-en files"


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, repos: Mapping[str, Repo], progress: bool = False
) -> Iterator[Pair]:
    """Sources with their human references (several references give several pairs)."""
    yield from _pairs(repos, {} if meta is None else meta, "reference", "wmt")


def system_pairs(
    work: Path, meta: dict[str, Any] | None = None, *, repos: Mapping[str, Repo], progress: bool = False
) -> Iterator[Pair]:
    """Sources with the submitted systems' outputs (synthetic targets)."""
    meta = {} if meta is None else meta
    meta["synthetic"] = "targets are machine translations of the human-written sources"
    yield from _pairs(repos, meta, "system", "wmt-sys")
