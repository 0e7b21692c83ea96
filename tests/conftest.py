"""Session-wide fixtures: a tiny random-weight model with a real SentencePiece tokenizer, exported to ONNX once."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "service"))  # test helpers (livesrv) importable by name

EN = [
    "the",
    "a",
    "house",
    "cat",
    "dog",
    "runs",
    "sees",
    "big",
    "small",
    "red",
    "blue",
    "green",
    "water",
    "light",
    "day",
    "night",
    "good",
    "old",
    "new",
    "world",
    "hello",
]
DE = [
    "das",
    "ein",
    "Haus",
    "Katze",
    "Hund",
    "rennt",
    "sieht",
    "gross",
    "klein",
    "rot",
    "blau",
    "grün",
    "Wasser",
    "Licht",
    "Tag",
    "Nacht",
    "gut",
    "alt",
    "neu",
    "Welt",
    "hallo",
]
SAMPLE_EN = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "The small blue dog runs to the green house and sees the water.",
]


def synthetic_sentences(n: int, seed: int = 0) -> list[str]:
    """Random word salad over a fixed English/German vocabulary (enough for a tokenizer)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = EN if rng.random() < 0.5 else DE
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))).capitalize() + ".")
    return out


def build_tiny_checkpoint(path: Path, *, seed: int = 0, d_model: int = 32, layers: int = 2) -> Path:
    """Random-weight bidirectional en<->de Transformer with a 120-piece joint vocabulary."""
    import torch

    from model.checkpoint import save_checkpoint
    from model.config import ModelConfig
    from model.tokenizer import Tokenizer, train_tokenizer
    from model.transformer import Transformer

    spm = train_tokenizer(synthetic_sentences(3000) + SAMPLE_EN, vocab_size=120, languages=("de", "en"))
    tok = Tokenizer(spm, target_tag="<2{lang}>", languages=("de", "en"))
    torch.manual_seed(seed)
    config = ModelConfig(
        src_vocab_size=tok.vocab_size,
        tgt_vocab_size=tok.vocab_size,
        d_model=d_model,
        n_heads=4,
        d_ff=2 * d_model,
        n_encoder_layers=layers,
        n_decoder_layers=layers,
        max_positions=256,
        languages=("de", "en"),
    )
    model = Transformer(config)
    with torch.no_grad():  # make eos unlikely so random outputs are not empty and lengths vary
        model.generator.weight[config.eos_id] *= 0.5
    save_checkpoint(path, model, spm, meta={"name": "tiny-random"})
    return path


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
    from export.onnx_export import export_model

    out = tmp_path_factory.mktemp("tiny-onnx") / "model"
    export_model(tiny_checkpoint, out)
    return out


@pytest.fixture(scope="session")
def tiny_translator(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    """A CPU Translator over the tiny model (shared; translate calls are stateless)."""
    from engine.translator import Translator

    return Translator(tiny_model_dir, device="cpu", intra_threads=1)


@pytest.fixture(scope="session")
def default_translator():  # type: ignore[no-untyped-def]
    """The shipped model (exported to ONNX on first use, as `transduce serve` does), or the tiny one without it."""
    from engine.translator import Translator
    from transduce.models import DEFAULT_CHECKPOINT, resolve_model_dir

    if not DEFAULT_CHECKPOINT.is_file():
        pytest.fail(f"the shipped model {DEFAULT_CHECKPOINT} is missing")
    return Translator(resolve_model_dir(None), device="cpu")
