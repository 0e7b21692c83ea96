"""A tiny random-weight bidirectional model (en<->de by default, or another pair of the languages in ``WORDS``) with a
real SentencePiece tokenizer, for tests."""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transduce.engine.shortlist import ShortlistTable

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
FR = [
    "le",
    "un",
    "maison",
    "chat",
    "chien",
    "court",
    "voit",
    "grand",
    "petit",
    "rouge",
    "bleu",
    "vert",
    "eau",
    "lumière",
    "jour",
    "nuit",
    "bon",
    "vieux",
    "nouveau",
    "monde",
    "bonjour",
]
ES = [
    "el",
    "una",
    "casa",
    "gato",
    "perro",
    "corre",
    "ve",
    "grande",
    "pequeño",
    "rojo",
    "azul",
    "verde",
    "agua",
    "luz",
    "día",
    "noche",
    "bueno",
    "viejo",
    "nuevo",
    "mundo",
    "hola",
]
WORDS = {"en": EN, "de": DE, "fr": FR, "es": ES}  # word i of each list translates word i of the others
SAMPLE_EN = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "The small blue dog runs to the green house and sees the water.",
]


def synthetic_sentences(n: int, seed: int = 0, languages: tuple[str, str] = ("en", "de")) -> list[str]:
    """Random word salad over the fixed vocabularies of two languages (enough for a tokenizer)."""
    rng = random.Random(seed)
    first, second = (WORDS[lang] for lang in languages)
    out = []
    for _ in range(n):
        words = first if rng.random() < 0.5 else second
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(2, 12))).capitalize() + ".")
    return out


def build_tiny_checkpoint(
    path: Path,
    *,
    seed: int = 0,
    d_model: int = 32,
    layers: int = 2,
    languages: tuple[str, str] = ("de", "en"),
    name: str = "tiny-random",
) -> Path:
    """Random-weight bidirectional Transformer between ``languages`` (en<->de by default; any two of ``WORDS``) with a
    120-piece joint vocabulary."""
    import torch

    from transduce.model.checkpoint import save_checkpoint
    from transduce.model.config import ModelConfig
    from transduce.model.transformer import Transformer
    from transduce.tokenizer import Tokenizer, train_tokenizer

    langs = (min(languages), max(languages))
    text = (langs[0], langs[1]) if "en" not in langs else ("en", langs[0] if langs[1] == "en" else langs[1])
    spm = train_tokenizer(synthetic_sentences(3000, languages=text) + SAMPLE_EN, vocab_size=120, languages=langs)
    tok = Tokenizer(spm, target_tag="<2{lang}>", languages=langs)
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
        languages=langs,
    )
    model = Transformer(config)
    with torch.no_grad():  # make eos unlikely so random outputs are not empty and lengths vary
        model.generator.weight[config.eos_id] *= 0.5
    save_checkpoint(path, model, spm, meta={"name": name})
    return path


def table_of(vocab_size: int, keys: list[int], frequent: list[int]) -> ShortlistTable:
    """A shortlist table with only a frequent list (no co-occurrence candidates) for every key: a sentence's
    candidates are then those, eos, unk and its own source pieces."""
    import numpy as np

    from transduce.engine.shortlist import ShortlistTable

    none = np.zeros(vocab_size + 1, np.int64)
    return ShortlistTable(
        vocab_size,
        {k: np.asarray(frequent, np.int32) for k in keys},
        dict.fromkeys(keys, none),
        {k: np.zeros(0, np.int32) for k in keys},
    )
