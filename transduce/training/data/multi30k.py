"""Multi30k task 1 (image captions with German translations; Flickr30k terms: non-commercial research and education)
from the repository multi30k/dataset: ``data/task1/raw/train.{en,de}.gz``, line-aligned.

Only ``train`` is training material: ``val`` is a shared dev set and every ``test_*`` split is reserved, so
``reserved_texts`` returns those captions for the decontamination filter.
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair, split_lines
from transduce.training.data.gitrepo import Repo

REPO = "multi30k"
TRAIN = "data/task1/raw/train.{lang}.gz"
_TEST = re.compile(r"^data/task[12]/raw/test_[^/]*\.(en|de)\.gz$")
_TEST_TAR = re.compile(r"^data/task1/[^/]*test[^/]*\.tar\.gz$")


def lines(data: bytes) -> list[str]:
    """The lines of a gzip-compressed text file (line breaks removed)."""
    return split_lines(gzip.decompress(data).decode("utf-8", "replace"))


def reserved_texts(repo: Repo) -> tuple[dict[str, list[str]], list[str]]:
    """({lang: captions}, files) of the reserved test captions: task 1 and task 2 ``test_*`` files (English and
    German) and the task 1 test-set tarball."""
    texts: dict[str, list[str]] = {"en": [], "de": []}
    files: list[str] = []
    for name in repo.files("data/"):
        match = _TEST.match(name)
        data = repo.read(name) if match or _TEST_TAR.match(name) else None
        if data is None:
            continue
        files.append(name)
        if match:
            texts[match.group(1)].extend(lines(data))
            continue
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
            for member in tf.getmembers():
                lang = member.name.rsplit(".", 1)[-1]
                f = tf.extractfile(member) if member.isfile() and lang in texts else None
                if f is not None:
                    texts[lang].extend(split_lines(f.read().decode("utf-8", "replace")))
    return texts, files


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, repos: Mapping[str, Repo], progress: bool = False
) -> Iterator[Pair]:
    """Task 1 train captions, English and German line by line."""
    meta = {} if meta is None else meta
    repo = repos[REPO]
    data = {lang: repo.read(TRAIN.format(lang=lang)) for lang in ("en", "de")}
    if data["en"] is None or data["de"] is None:
        meta["skipped"] = f"{TRAIN.format(lang='{en,de}')} not found in {repo.describe()}"
        return
    en, de = lines(data["en"]), lines(data["de"])
    if len(en) != len(de):
        meta["skipped"] = f"train.en has {len(en)} lines but train.de {len(de)}"
        return
    meta.update(repository=repo.describe(), files=[TRAIN.format(lang=x) for x in ("en", "de")], lines=len(en))
    for en_text, de_text in zip(en, de, strict=True):
        yield Pair("multi30k", en_text, de_text)
