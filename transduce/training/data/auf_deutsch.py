"""Everyday phrases of the German course ``auf-deutsch`` (PyPI, MIT): every ``{"de": ..., "en": ...}`` object in the
JSON files under ``auf_deutsch/content/`` of its wheel (phrases, examples, dialogues, stories, grammar examples)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair
from transduce.training.data.fetch import pip_wheel

PACKAGE = "auf-deutsch"
WHEEL_NAME = "auf_deutsch"  # how the wheel file name spells the project
CONTENT = "auf_deutsch/content/"


def texts(obj: Any) -> Iterator[tuple[str, str]]:
    """(en, de) of every object with string ``en`` and ``de`` fields, at any depth, in document order."""
    if isinstance(obj, dict):
        en, de = obj.get("en"), obj.get("de")
        if isinstance(en, str) and isinstance(de, str):
            yield en, de
        for value in obj.values():
            yield from texts(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from texts(value)


def read_wheel(wheel: Path) -> tuple[list[tuple[str, str]], int]:
    """(pairs, number of JSON files read) of the wheel's content folder."""
    out: list[tuple[str, str]] = []
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(CONTENT) and n.endswith(".json"))
        for name in names:
            out.extend(texts(json.loads(zf.read(name).decode("utf-8"))))
    return out, len(names)


def pairs(work: Path, meta: dict[str, Any] | None = None, *, progress: bool = False) -> Iterator[Pair]:
    """Download the wheel (never installed) and read its content JSON."""
    meta = {} if meta is None else meta
    wheel = pip_wheel(WHEEL_NAME, work, PACKAGE)
    found, files = read_wheel(wheel)
    meta.update(package=wheel.name, json_files=files)
    for en, de in found:
        yield Pair("auf-deutsch", en, de)
