"""Tatoeba English-German sentences (CC-BY 2.0 FR) from ``deu-eng.zip`` (manythings.org's Anki export, ``deu.txt``:
English<TAB>German[<TAB>attribution]) in the repository rioyshky/translation.

Only pairs whose English side is longer than 24 characters are training material: the short ones are reserved for
evaluation. They are returned by ``short_pairs`` so the builder keeps their texts out of every split (so a long pair
that shares its English or German side with a short one is dropped too).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair, normalize, split_lines
from transduce.training.data.gitrepo import Repo

REPO = "tatoeba"
ZIP = "deu-eng.zip"
MEMBER = "deu.txt"
MIN_EN_CHARS = 25  # English side longer than 24 characters (after normalize); shorter pairs are reserved


def parse(text: str) -> Iterator[tuple[str, str]]:
    """(en, de) of each ``English<TAB>German[<TAB>...]`` line, normalised; malformed lines are skipped."""
    for line in split_lines(text):
        fields = line.split("\t")
        if len(fields) >= 2:
            yield normalize(fields[0]), normalize(fields[1])


def is_short(en: str) -> bool:
    """True for the pairs reserved for evaluation: English side of 24 characters or fewer (after normalize)."""
    return len(normalize(en)) < MIN_EN_CHARS


def read(repo: Repo) -> list[tuple[str, str]] | None:
    """All (en, de) lines of the zip's deu.txt, or None when the repository copy lacks it."""
    data = repo.read(ZIP)
    if data is None:
        return None
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        text = zf.read(MEMBER).decode("utf-8", "replace")
    return list(parse(text))


def short_pairs(repo: Repo) -> list[tuple[str, str]]:
    """The reserved pairs (English side of 24 characters or fewer)."""
    return [(en, de) for en, de in read(repo) or [] if is_short(en)]


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, repos: Mapping[str, Repo], progress: bool = False
) -> Iterator[Pair]:
    """The long pairs (English side longer than 24 characters)."""
    meta = {} if meta is None else meta
    repo = repos[REPO]
    lines = read(repo)
    if lines is None:
        meta["skipped"] = f"{ZIP} not found in {repo.describe()}"
        return
    long = [(en, de) for en, de in lines if not is_short(en)]
    meta.update(
        repository=repo.describe(),
        file=f"{ZIP}:{MEMBER}",
        lines=len(lines),
        reserved_short_pairs=len(lines) - len(long),
        rule="English side longer than 24 characters; pairs sharing a side with a shorter (reserved) pair are "
        "removed by the decontamination filter",
    )
    for en, de in long:
        yield Pair("tatoeba", en, de)
