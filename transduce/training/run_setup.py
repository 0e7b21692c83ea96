"""What a training run starts from: its tokenizer (trained on the corpus, or a warm start's), its model's config,
and a warm start's dimensions and weights."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import torch

from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer
from transduce.tokenizer import Tokenizer, train_tokenizer
from transduce.training.batching import read_pairs
from transduce.training.config import TrainConfig


def build_tokenizer(data_dir: Path, out_dir: Path, cfg: TrainConfig) -> bytes:
    """Reuse out_dir/tokenizer.model, or train a joint SentencePiece model on a sample of train.tsv."""
    path = out_dir / "tokenizer.model"
    if path.is_file():
        return path.read_bytes()
    rows = read_pairs(data_dir / "train.tsv")
    rng = random.Random(cfg.seed)
    sample = rng.sample(rows, min(len(rows), cfg.tokenizer_sample // 2))
    spm = train_tokenizer(
        [t for _, en, de in sample for t in (en, de)],
        vocab_size=cfg.vocab_size,
        languages=cfg.languages,
        input_sentence_size=cfg.tokenizer_sample,
    )
    path.write_bytes(spm)
    return spm


def model_config(cfg: TrainConfig, tokenizer: Tokenizer) -> ModelConfig:
    """The ModelConfig a TrainConfig and a tokenizer define (special ids read from the tokenizer)."""
    v = tokenizer.vocab_size
    return ModelConfig(
        src_vocab_size=v,
        tgt_vocab_size=v,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff,
        n_encoder_layers=cfg.n_encoder_layers,
        n_decoder_layers=cfg.n_decoder_layers,
        dropout=cfg.dropout,
        max_positions=cfg.max_positions,
        pad_id=tokenizer.pad_id,
        unk_id=tokenizer.unk_id,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        decoder_start_id=tokenizer.bos_id,
        languages=cfg.languages,
    )


def warm_start_config(cfg: TrainConfig, init: dict[str, Any], out_dir: Path) -> TrainConfig:
    """``cfg`` with the dimensions of the checkpoint ``init``, whose tokenizer becomes the run's tokenizer."""
    mc = ModelConfig.from_dict(init["model_config"])
    if mc.target_tag != "<2{lang}>" or not mc.languages:
        raise ValueError(f"{cfg.init_from}: only checkpoints with <2xx> target tags can be trained on here")
    (out_dir / "tokenizer.model").write_bytes(init["tokenizer_model"])
    return dataclasses.replace(
        cfg,
        d_model=mc.d_model,
        n_heads=mc.n_heads,
        d_ff=mc.d_ff,
        n_encoder_layers=mc.n_encoder_layers,
        n_decoder_layers=mc.n_decoder_layers,
        max_positions=mc.max_positions,
        vocab_size=mc.src_vocab_size,
        languages=mc.languages,
    )


def load_weights(model: Transformer, state: dict[str, torch.Tensor], source: str) -> None:
    """Copy a checkpoint's weights (any float dtype) into ``model``; every parameter must be there."""
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    tied = {"generator.weight", "tgt_embed.weight"}
    if [k for k in missing if k not in tied] or unexpected:
        raise ValueError(f"{source} does not fit the model: missing {missing}, unexpected {unexpected}")
