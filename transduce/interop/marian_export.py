"""``export_marian``: a transduce checkpoint as a Hugging Face MarianMTModel directory that transformers and
CTranslate2's ``ct2-transformers-converter`` run with our exact outputs (how: ``interop.marian``'s docstring)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transduce.export.files import check_target, replacing_dir
from transduce.interop.marian_vocab import EXPORT_PAD, export_spm
from transduce.interop.marian_weights import (
    EXCLUDED_BIAS,
    interleaved_to_concat,
    layer_names,
    permute,
    write_safetensors,
)
from transduce.model.checkpoint import load_checkpoint
from transduce.model.config import ModelConfig
from transduce.tokenizer import Tokenizer

# what marks an earlier export (file, key, value): export_marian writes that key into its config.json
MARIAN_EXPORT = ("config.json", "transduce_export", "marian")
_WHAT, _UNSTAMPED = "Marian export", " (exports before 2026-11-26 have none)"  # for the refusal's message


@dataclass(frozen=True)
class ExportReport:
    """What ``export_marian`` wrote."""

    out_dir: str
    vocab_size: int  # HF vocabulary size: ours + the appended pad row
    pad_id: int  # HF pad = decoder start = the appended row
    eos_id: int
    permuted_from_interleaved: bool


def _check_exportable(cfg: ModelConfig) -> None:
    if cfg.norm_position != "post":
        raise ValueError("HF Marian is post-norm only; this checkpoint is pre-norm and has no exact Marian equivalent")
    if not cfg.share_embeddings:
        raise ValueError("export-marian needs shared source/target embeddings (share_embeddings=True)")
    if cfg.layer_norm_eps != 1e-5:
        raise ValueError(f"HF Marian uses LayerNorm eps 1e-5; this checkpoint uses {cfg.layer_norm_eps}")


def _hf_config(cfg: ModelConfig, vocab_size: int, pad: int) -> dict[str, Any]:
    return {
        MARIAN_EXPORT[1]: MARIAN_EXPORT[2],  # what an earlier export carries: only such a directory is replaced
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": vocab_size,
        "decoder_vocab_size": vocab_size,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers,
        "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": cfg.activation,
        "max_position_embeddings": cfg.max_positions,
        "scale_embedding": cfg.scale_embedding,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": 0.0,
        "pad_token_id": pad,
        "eos_token_id": cfg.eos_id,
        "decoder_start_token_id": pad,
        "forced_eos_token_id": None,  # transduce stops at max length without forcing eos
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "is_encoder_decoder": True,
        "use_cache": True,
    }


def export_marian(checkpoint: str | Path, out_hf_dir: str | Path) -> ExportReport:
    """Write a checkpoint as an HF MarianMTModel directory (written to a temp dir, then moved into place; an
    existing directory only when it is an earlier such export and does not hold the checkpoint)."""
    # refused before the work (loading, permuting), as replacing_dir refuses it again when it writes
    out = check_target(Path(out_hf_dir), marker=MARIAN_EXPORT, inputs=[checkpoint], what=_WHAT, hint=_UNSTAMPED)
    ckpt = load_checkpoint(checkpoint)
    cfg, model = ckpt.config, ckpt.model
    _check_exportable(cfg)
    tok = Tokenizer(ckpt.tokenizer_model)
    V, d = cfg.tgt_vocab_size, cfg.d_model
    if tok.vocab_size != V:
        raise ValueError(f"the checkpoint's tokenizer has {tok.vocab_size} pieces but the model {V} ids")
    spm_bytes, vocab = export_spm(ckpt.tokenizer_model, cfg.pad_id)
    pad = V  # the appended row
    perm = interleaved_to_concat(d) if cfg.sinusoid_layout == "interleaved" else torch.arange(d)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    emb = sd["src_embed.weight"][:, perm]
    bias = sd["logits_bias"] if "logits_bias" in sd else torch.zeros(V)
    pe = model.get_buffer("pe")[:, perm].float()  # bitwise the concat table when ours is interleaved
    dec_pe = pe.clone()
    dec_pe[0] = emb[cfg.decoder_start_id] * model.embed_scale + pe[0]  # the same float ops as Transformer.embed
    state = {
        "model.shared.weight": torch.cat([emb, torch.zeros(1, d)]),
        "final_logits_bias": torch.cat([bias, torch.tensor([EXCLUDED_BIAS])])[None],
        "model.encoder.embed_positions.weight": pe,
        "model.decoder.embed_positions.weight": dec_pe,
    }
    for ours, hf, role in layer_names(cfg.n_encoder_layers, cfg.n_decoder_layers):
        state[f"model.{hf}"] = permute(sd[ours], role, perm)
    pairs = ckpt.meta.get("pairs") or (
        [list(p) for p in itertools.permutations(cfg.languages, 2)] if cfg.target_tag else [list(cfg.languages)]
    )
    if not pairs or any(len(p) != 2 for p in pairs):  # (an untagged model of 3 languages: an unpacking error)
        raise ValueError(
            f"the checkpoint names no direction to translate (languages {list(cfg.languages)}, no target tag, no "
            "meta pairs): an untagged model needs meta['pairs'] naming its one direction"
        )
    tok_cfg: dict[str, Any] = {
        "tokenizer_class": "MarianTokenizer",
        "unk_token": tok.sp.IdToPiece(tok.unk_id),
        "eos_token": tok.sp.IdToPiece(cfg.eos_id),
        "pad_token": EXPORT_PAD,
        "model_max_length": cfg.max_positions,
        "separate_vocabs": False,
    }
    if len(pairs) == 1:
        tok_cfg["source_lang"], tok_cfg["target_lang"] = pairs[0]
    generation = {
        "decoder_start_token_id": pad,
        "eos_token_id": cfg.eos_id,
        "pad_token_id": pad,
        "forced_eos_token_id": None,
        "max_length": cfg.max_positions,
    }
    with replacing_dir(out, marker=MARIAN_EXPORT, inputs=[checkpoint], what=_WHAT, hint=_UNSTAMPED) as tmp:
        write_safetensors(tmp / "model.safetensors", state)
        # what import-marian needs to give the model back as it was: its target tag (HF users put it before the
        # source text themselves: "<2de> Hello."), its languages and directions
        recorded = {"languages": list(cfg.languages), "target_tag": cfg.target_tag, "pairs": [list(p) for p in pairs]}
        hf_config = {**_hf_config(cfg, V + 1, pad), "transduce_model": recorded}
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
        (tmp / "vocab.json").write_text(json.dumps(vocab, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        for f in ("source.spm", "target.spm"):
            (tmp / f).write_bytes(spm_bytes)
    return ExportReport(str(out), V + 1, pad, cfg.eos_id, cfg.sinusoid_layout == "interleaved")
