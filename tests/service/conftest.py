"""Service fixtures: the async tests run on asyncio. The harness itself (apps, fake, gate) is tests.service.harness."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def models_dir(tmp_path: Path, tiny_model_dir: Path, tiny_fr_model_dir: Path, marian_es_model_dir: Path) -> Path:
    """A directory of three model directories (en<->de, en<->fr, and a converted Marian en->es), copied so that a
    test may change them."""
    root = tmp_path / "models"
    for name, source in (("de", tiny_model_dir), ("fr", tiny_fr_model_dir), ("es", marian_es_model_dir)):
        shutil.copytree(source, root / name)
    return root
