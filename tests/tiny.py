"""A tiny random-weight bidirectional en<->de model with a real SentencePiece tokenizer, for tests."""

from __future__ import annotations

import random
from pathlib import Path

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

    from transduce.model.checkpoint import save_checkpoint
    from transduce.model.config import ModelConfig
    from transduce.model.transformer import Transformer
    from transduce.tokenizer import Tokenizer, train_tokenizer

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
