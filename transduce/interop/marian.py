"""Hugging Face Marian / OPUS-MT interop: ``import_marian`` (HF dir -> checkpoint); ``export_marian`` (the reverse)
lives in ``interop.marian_export``.

Import is exact: same weights, same special ids, one SentencePiece model whose ids are vocab.json's ids
(see interop.marian_vocab). Export writes a MarianMTModel directory that transformers and CTranslate2's
``ct2-transformers-converter`` run with our exact outputs:

- ids 0..V-1 keep our ids; one extra row V is appended as the Marian "<pad>": zero embedding, logit bias -1e4 (so its
  probability is exactly 0 in float32 and our softmax is unchanged). CTranslate2's Marian converter drops the last
  row (it assumes it is the pad) and starts the decoder from a zero embedding; HF's decoder start is this zero row.
- our decoder start token (bos) is folded into row 0 of the decoder's positional table: decoder position 0 only
  ever holds the start token, so PE'[0] = emb[start] * scale + PE[0] is exact for every sequence. HF loads the table
  from transduce.model.safetensors and CTranslate2 copies it from the loaded HF model. (HF's ``save_pretrained`` drops
  positional tables on re-save; re-run ``transduce export-marian`` rather than re-saving.)
- an interleaved sin/cos layout is mapped exactly to Marian's concat layout by permuting the residual stream:
  embedding columns, LayerNorm parameters, input columns of q/k/v/fc1 and output rows of out_proj/fc2.
- pre-norm checkpoints (HF Marian is post-norm only), untied embeddings and LayerNorm eps != 1e-5 are refused.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transduce.interop.marian_export import ExportReport, export_marian
from transduce.interop.marian_vocab import build_marian_spm
from transduce.interop.marian_weights import EXCLUDED_BIAS, layer_names, read_hf_weights
from transduce.model.checkpoint import first_line, save_checkpoint
from transduce.model.config import ModelConfig
from transduce.model.layers import sinusoid_table
from transduce.model.transformer import Transformer
from transduce.paths import check_output

log = logging.getLogger("transduce.interop")

# MarianConfig defaults (transformers 5.x) for keys a config.json may leave out
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "decoder_start_token_id": 58100,
    "share_encoder_decoder_embeddings": True,
}
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu", "gelu_python": "gelu"}
POSITION_TOLERANCE = 1e-4


@dataclass(frozen=True)
class ImportReport:
    """What ``import_marian`` wrote."""

    checkpoint: str
    name: str
    pair: tuple[str, str]
    vocab_size: int
    from_source: int  # vocabulary pieces segmented with source.spm
    target_only: int  # pieces only the target side produces
    missing_from_vocab: int  # source.spm pieces that Marian maps to <unk> (see interop.marian_vocab)
    decoder_start_folded: bool  # a non-standard decoder position 0 (e.g. our own export) folded into the start row
    pad_banned: bool  # <pad> made impossible to generate (logit bias -1e4), like OPUS-MT's bad_words_ids=[[pad]]


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise ValueError(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc


def _token_name(value: Any, default: str) -> str:
    """A special-token name from tokenizer_config.json (a string or a serialized AddedToken dict)."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else default


def marian_config(hf: dict[str, Any], *, unk_id: int, languages: tuple[str, ...], target_tag: str = "") -> ModelConfig:
    """ModelConfig for an HF MarianConfig dict; ValueError for anything HF Marian computes that we cannot."""
    g = {k: hf[k] if hf.get(k) is not None else default for k, default in HF_DEFAULTS.items()}
    if hf.get("model_type", "marian") != "marian":
        raise ValueError(f"config.json has model_type {hf.get('model_type')!r}, expected 'marian'")
    for flag in ("normalize_before", "normalize_embedding", "add_final_layer_norm", "add_bias_logits"):
        if hf.get(flag):
            raise ValueError(
                f"config.json sets {flag}=true, which HF MarianMTModel ignores; refusing an ambiguous model"
            )
    if hf.get("static_position_embeddings") is False:
        raise ValueError("config.json sets static_position_embeddings=false: learned positions are not supported")
    if not g["share_encoder_decoder_embeddings"] or g["decoder_vocab_size"] not in (None, g["vocab_size"]):
        raise ValueError(
            "separate source/target vocabularies (share_encoder_decoder_embeddings=false) are not supported"
        )
    if hf.get("tie_word_embeddings") is False:
        raise ValueError("tie_word_embeddings=false (an untied output layer) is not supported")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if g[a] != g[b]:
            raise ValueError(f"{a}={g[a]} differs from {b}={g[b]}; transduce uses one value for both")
    if g["activation_function"] not in ACTIVATIONS:
        raise ValueError(f"activation_function {g['activation_function']!r} is not one of {sorted(ACTIVATIONS)}")
    eos = g["eos_token_id"][0] if isinstance(g["eos_token_id"], list) else g["eos_token_id"]
    return ModelConfig(
        src_vocab_size=g["vocab_size"],
        tgt_vocab_size=g["vocab_size"],
        d_model=g["d_model"],
        n_heads=g["encoder_attention_heads"],
        d_ff=g["encoder_ffn_dim"],
        n_encoder_layers=g["encoder_layers"],
        n_decoder_layers=g["decoder_layers"],
        dropout=float(g["dropout"]),
        attention_dropout=float(g["attention_dropout"]),
        max_positions=g["max_position_embeddings"],
        activation=ACTIVATIONS[g["activation_function"]],
        norm_position="post",
        sinusoid_layout="concat",
        share_embeddings=True,
        scale_embedding=bool(g["scale_embedding"]),
        final_logits_bias=True,
        layer_norm_eps=1e-5,
        pad_id=g["pad_token_id"],
        unk_id=unk_id,
        bos_id=g["decoder_start_token_id"],  # Marian has no <s>; the start token stands in
        eos_id=eos,
        decoder_start_id=g["decoder_start_token_id"],
        languages=languages,
        target_tag=target_tag,
    )


def _own_export(hf: dict[str, Any]) -> tuple[tuple[str, ...], str, list[tuple[str, str]]] | None:
    """The languages, target tag and pairs this project's ``export_marian`` recorded in config.json (a tagged model
    must get its tag back, and every direction: the round trip translated otherwise), or None for another model."""
    recorded = hf.get("transduce_model")
    if not isinstance(recorded, dict):
        return None
    languages, tag, pairs = recorded.get("languages"), recorded.get("target_tag"), recorded.get("pairs")
    if not (
        isinstance(languages, list)
        and all(isinstance(code, str) and LANGUAGE_CODE.fullmatch(code) for code in languages)
        and isinstance(tag, str)
        and isinstance(pairs, list)
        and pairs
        and all(isinstance(p, list) and len(p) == 2 and set(p) <= set(languages) for p in pairs)
    ):
        raise ValueError(f"config.json's transduce_model is damaged: {recorded!r:.200}")
    return tuple(languages), tag, [(str(a), str(b)) for a, b in pairs]


def _languages(hf_dir: Path, tok_cfg: dict[str, Any], source: str | None, target: str | None) -> tuple[str, str]:
    match = re.search(r"opus-mt-([A-Za-z_]+)-([A-Za-z_]+)$", hf_dir.resolve().name)
    source = source or tok_cfg.get("source_lang") or (match.group(1) if match else None)
    target = target or tok_cfg.get("target_lang") or (match.group(2) if match else None)
    if not source or not target:
        raise ValueError(f"cannot tell the language pair of {hf_dir}: pass --source-lang and --target-lang")
    for code in (str(source), str(target)):
        if not LANGUAGE_CODE.fullmatch(code):  # ("not a lang" was served as the pair "not a lang->en")
            raise ValueError(
                f"{code!r} is not a language code such as en, de or pt-BR: pass --source-lang/--target-lang"
            )
    return str(source), str(target)


LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,8}(?:[_-][A-Za-z0-9]{1,8})*")  # BCP 47's shape (and OPUS-MT's "zh_cn")


def _import_state(state: dict[str, Tensor], cfg: ModelConfig) -> tuple[dict[str, Tensor], bool]:
    """Our state dict from HF tensors; second value: whether a shifted decoder position 0 was folded in."""
    V, d, used = cfg.tgt_vocab_size, cfg.d_model, set()
    embeddings = [
        k for k in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight") if k in state
    ]
    if not embeddings:
        raise ValueError("the HF weights have no token embedding (model.shared.weight)")
    emb = state[embeddings[0]].float().clone()
    if tuple(emb.shape) != (V, d):
        raise ValueError(f"token embedding has shape {tuple(emb.shape)}, config.json says ({V}, {d})")
    for key in [*embeddings, "lm_head.weight"]:
        if key in state and not torch.equal(state[key].float(), emb):
            raise ValueError(f"{key} differs from {embeddings[0]}: untied embeddings are not supported")
        used.add(key)
    bias = state.get("final_logits_bias", torch.zeros(1, V)).float().reshape(-1).clone()
    if bias.numel() != V:
        raise ValueError(f"final_logits_bias has {bias.numel()} entries, expected {V}")
    used.add("final_logits_bias")
    out = {"src_embed.weight": emb, "logits_bias": bias}
    for ours, hf, _ in layer_names(cfg.n_encoder_layers, cfg.n_decoder_layers):
        if hf not in state:
            raise ValueError(
                f"the HF weights lack {hf!r} (is this a MarianMTModel with {cfg.n_encoder_layers} layers?)"
            )
        out[ours] = state[hf].float()
        used.add(hf)
    table = sinusoid_table(cfg.max_positions, d, "concat")
    folded = False
    for stack in ("encoder", "decoder"):
        key = f"{stack}.embed_positions.weight"
        used.add(key)
        if key not in state:
            continue
        pe = state[key].float()
        if tuple(pe.shape) != tuple(table.shape) or (pe[1:] - table[1:]).abs().max() > POSITION_TOLERANCE:
            raise ValueError(f"{key} is not Marian's sinusoidal table; learned positions are not supported")
        delta = pe[0] - table[0]
        if delta.abs().max() > POSITION_TOLERANCE:
            start = cfg.decoder_start_id
            if stack == "encoder" or bias[start] > EXCLUDED_BIAS / 10:
                raise ValueError(f"{key} row 0 is not sinusoidal and cannot be folded into the start token exactly")
            scale = float(d) ** 0.5 if cfg.scale_embedding else 1.0
            emb[start] += delta / scale  # only ever fed at decoder position 0; never generated (bias -1e4)
            folded = True
    unexpected = sorted(k for k in set(state) - used if not k.endswith("num_batches_tracked"))
    if unexpected:
        raise ValueError(f"the HF weights have tensors transduce does not model: {unexpected[:5]}")
    return out, folded


def import_marian(
    hf_dir: str | Path,
    out_checkpoint: str | Path,
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    name: str | None = None,
    ban_pad: bool = False,
) -> ImportReport:
    """Convert an HF MarianMTModel directory (config.json, weights, source.spm, target.spm, vocab.json).

    ``ban_pad`` sets the <pad> logit bias to -1e4 so it is never generated, as transformers' generate does for
    OPUS-MT through ``bad_words_ids=[[pad]]``; other tokens' log-probs then differ from transformers' by
    log(1 - p(pad)) (transformers masks after the softmax), which is why it is off by default.
    """
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise ValueError(f"{hf_dir} is not a directory")
    check_output(out_checkpoint, [hf_dir, *hf_dir.iterdir()], what="the checkpoint")  # never one of its files
    try:
        return _import_marian(hf_dir, out_checkpoint, source_lang, target_lang, name, ban_pad)
    except (KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError, RuntimeError) as exc:
        raise ValueError(f"{hf_dir} is not a Marian model this can read: {first_line(exc)}") from exc


def _import_marian(
    hf_dir: Path,
    out_checkpoint: str | Path,
    source_lang: str | None,
    target_lang: str | None,
    name: str | None,
    ban_pad: bool,
) -> ImportReport:
    hf = _read_json(hf_dir / "config.json")
    tok_cfg = _read_json(hf_dir / "tokenizer_config.json") if (hf_dir / "tokenizer_config.json").is_file() else {}
    if tok_cfg.get("separate_vocabs") or (hf_dir / "target_vocab.json").is_file():
        raise ValueError("separate source/target vocabularies (separate_vocabs) are not supported")
    vocab = _read_json(hf_dir / "vocab.json")
    unk, eos, pad = (
        _token_name(tok_cfg.get("unk_token"), "<unk>"),
        _token_name(tok_cfg.get("eos_token"), "</s>"),
        _token_name(tok_cfg.get("pad_token"), "<pad>"),
    )
    spm_files = [hf_dir / "source.spm", hf_dir / "target.spm"]
    for f in spm_files:
        if not f.is_file():
            raise ValueError(f"{f} is missing")
    sp = build_marian_spm(spm_files[0].read_bytes(), spm_files[1].read_bytes(), vocab, unk=unk, eos=eos, pad=pad)
    own = _own_export(hf)
    languages: tuple[str, ...]
    if own is None:
        pair = _languages(hf_dir, tok_cfg, source_lang, target_lang)
        languages, tag, pairs = pair, "", [pair]
    else:  # this project's own export: its languages, tag and directions as they were (one, when it is named)
        languages, tag, pairs = own
        if source_lang is not None or target_lang is not None:
            pair = _languages(hf_dir, {}, source_lang or pairs[0][0], target_lang or pairs[0][1])
            if not set(pair) <= set(languages):  # (an override dropped the tag, and the model mistranslated)
                raise ValueError(f"{pair[0]}->{pair[1]} is not a direction of this model (its languages: {languages})")
            pairs = [pair]
        pair = pairs[0]
    cfg = marian_config(hf, unk_id=vocab[unk], languages=languages, target_tag=tag)
    if len(vocab) != cfg.tgt_vocab_size:
        raise ValueError(f"vocab.json has {len(vocab)} entries but config.json says vocab_size={cfg.tgt_vocab_size}")
    if (vocab[eos], vocab[pad]) != (cfg.eos_id, cfg.pad_id):
        raise ValueError(
            f"vocab.json ids of {eos!r}/{pad!r} ({vocab[eos]}/{vocab[pad]}) differ from config.json's "
            f"eos_token_id/pad_token_id ({cfg.eos_id}/{cfg.pad_id})"
        )
    state, folded = _import_state(read_hf_weights(hf_dir), cfg)
    if ban_pad:
        state["logits_bias"][cfg.pad_id] = EXCLUDED_BIAS
    model = Transformer(cfg)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise ValueError(f"the HF weights do not fit config.json: {exc}") from exc
    missing = [k for k in missing if k not in ("tgt_embed.weight", "generator.weight")]
    assert not missing and not unexpected, (missing, unexpected)
    name = name or hf_dir.resolve().name
    save_checkpoint(
        out_checkpoint,
        model.eval(),
        sp.model,
        meta={"name": name, "pairs": [list(p) for p in pairs], "source": "marian"},
    )
    if sp.missing_from_vocab:
        log.warning(
            "%d source.spm pieces are not in vocab.json (e.g. %s): Marian maps them to <unk>, transduce re-segments "
            "such words with in-vocabulary pieces",
            len(sp.missing_from_vocab),
            sp.missing_from_vocab[:5],
        )
    return ImportReport(
        str(out_checkpoint), name, pair, cfg.tgt_vocab_size, sp.from_source, sp.target_only,
        len(sp.missing_from_vocab), folded, ban_pad,
    )  # fmt: skip


def report_dict(report: ImportReport | ExportReport) -> dict[str, Any]:
    """JSON-ready form of a report."""
    return asdict(report)


# export_marian: importable from here, its home before interop.marian_export
__all__ = ["ExportReport", "ImportReport", "export_marian", "import_marian", "report_dict"]
