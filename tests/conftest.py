"""Session-wide fixtures: a tiny random-weight model with a real SentencePiece tokenizer, exported to ONNX once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.tiny import build_tiny_checkpoint
from transduce.paths import user_cache_dir

# hypothesis keeps its example database and caches in ./.hypothesis unless told otherwise: not in the work tree
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(user_cache_dir() / "hypothesis"))

if TYPE_CHECKING:
    from transduce.engine.translator import Translator


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One PyTorch thread for a module's tiny models: a busy 2-core machine runs them many times slower with two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the tiny checkpoint (fp32)."""
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "checkpoint.pt")


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint exported (and verified) as an ONNX model directory."""
    from transduce.export.onnx_export import export_model

    out = tmp_path_factory.mktemp("tiny-onnx") / "model"
    export_model(tiny_checkpoint, out)
    return out


@pytest.fixture(scope="session")
def tiny_translator(tiny_model_dir: Path) -> Translator:
    """A CPU Translator over the tiny model (shared; translate calls are stateless)."""
    from transduce.engine.translator import Translator

    return Translator(tiny_model_dir, device="cpu", intra_threads=1)


@pytest.fixture(scope="session")
def default_translator() -> Translator:
    """The shipped model (exported to ONNX on first use, as `transduce serve` does), or the tiny one without it."""
    from transduce.engine.translator import Translator
    from transduce.shipped import DEFAULT_CHECKPOINT, resolve_model_dir

    if not DEFAULT_CHECKPOINT.is_file():
        pytest.fail(f"the shipped model {DEFAULT_CHECKPOINT} is missing")
    return Translator(resolve_model_dir(None), device="cpu")
