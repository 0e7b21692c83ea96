"""Session-wide fixtures: a tiny random-weight model with a real SentencePiece tokenizer, exported to ONNX once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.tiny import build_tiny_checkpoint
from transduce.paths import user_cache_dir

# hypothesis keeps its example database and caches in ./.hypothesis unless told otherwise: not in the work tree
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(user_cache_dir() / "hypothesis"))

if TYPE_CHECKING:
    from transduce.engine.translator import Translator


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """PyTorch on ``n`` threads inside the block."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def no_shared_thread_pool() -> Iterator[None]:
    """Engines the tests open in this process (the service's, the command line's) keep pools of their own: once
    onnxruntime's process-wide pool is made it refuses every session with a pool of its own, which the tests' plain
    sessions have. The shared pool and arena are tested in subprocesses (tests/engine/test_translator.py,
    tests/engine/test_arena.py)."""
    from transduce.engine import session
    from transduce.engine.arena import SharedArena

    real, session.PROCESS_POOL = session.PROCESS_POOL, session.SharedPool(None)
    real_arena, session.PROCESS_ARENA = session.PROCESS_ARENA, SharedArena(None)  # the same for the shared arena
    try:
        yield
    finally:
        session.PROCESS_POOL, session.PROCESS_ARENA = real, real_arena


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One PyTorch thread for a module's tiny models: a busy 2-core machine runs them many times slower with two."""
    with torch_threads(1):
        yield


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
def shortlist_model_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model exported with a shortlist (a table naming only eos: a sentence's candidates are eos, unk and
    its source pieces, so sentences differ in theirs; tests swap other tables in)."""
    from tests.tiny import table_of
    from transduce.export.onnx_export import ExportConfig, export_model
    from transduce.model.checkpoint import load_checkpoint

    root = tmp_path_factory.mktemp("shortlist")
    tok = load_checkpoint(tiny_checkpoint).tokenizer()
    keys = [int(tok.tag_id(lang) or 0) for lang in ("de", "en")]
    table_of(tok.vocab_size, keys, [tok.eos_id]).save(root / "shortlist.npz")
    export_model(tiny_checkpoint, root / "model", ExportConfig(shortlist=root / "shortlist.npz", verify=False))
    return root / "model"


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


@pytest.fixture(scope="session")
def tiny_fr_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny random model, en<->fr (another seed, its own tokenizer), exported: for serving several models."""
    from transduce.export.onnx_export import export_model

    root = tmp_path_factory.mktemp("tiny-fr")
    with torch_threads(1):
        checkpoint = build_tiny_checkpoint(
            root / "checkpoint.pt", seed=1, languages=("en", "fr"), name="tiny-random-fr"
        )
        export_model(checkpoint, root / "model")
    return root / "model"


@pytest.fixture(scope="session")
def marian_es_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Hugging Face Marian model (briefly trained on word-for-word toy pairs), imported with
    ``transduce.interop`` as an en->es model and exported: an OPUS-MT-style one-direction model."""
    pytest.importorskip("transformers", reason="transformers is a test extra for the Marian interop")
    from tests.interop.test_marian import build_hf_marian
    from transduce.export.onnx_export import export_model
    from transduce.interop.marian import import_marian

    root = tmp_path_factory.mktemp("marian-es")
    with torch_threads(1):  # a few seconds on one thread; many times longer on two busy cores
        import_marian(build_hf_marian(root / "hf"), root / "marian.pt", source_lang="en", target_lang="es")
        export_model(root / "marian.pt", root / "model")
    return root / "model"
