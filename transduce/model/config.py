"""ModelConfig: every hyper-parameter of the Transformer, saved in checkpoints and rebuilt from them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ACTIVATIONS = ("relu", "swish", "gelu")
NORM_POSITIONS = ("post", "pre")
SINUSOID_LAYOUTS = ("interleaved", "concat")


_KINDS: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "str": str, "bool": bool}
_KIND_NAMES = {int: "a whole number", (int, float): "a number", str: "a text", bool: "true or false"}
_POSITIVE = (
    "src_vocab_size",
    "tgt_vocab_size",
    "d_model",
    "n_heads",
    "d_ff",
    "n_encoder_layers",
    "n_decoder_layers",
    "max_positions",
)


@dataclass(frozen=True)
class ModelConfig:
    """Transformer hyper-parameters; defaults are the paper's base model (section 3, table 3)."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_positions: int = 1024
    activation: str = "relu"  # relu (paper) | swish (Marian/OPUS-MT) | gelu
    norm_position: str = "post"  # post: LayerNorm(x + Sublayer(x)) as in the paper | pre: x + Sublayer(LayerNorm(x))
    sinusoid_layout: str = (
        "interleaved"  # interleaved sin/cos (paper) | concat: first half sin, second half cos (Marian)
    )
    share_embeddings: bool = True  # one matrix for source/target embeddings and the pre-softmax projection
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model)
    final_logits_bias: bool = False  # a learned/imported bias added to the output logits (Marian)
    layer_norm_eps: float = 1e-5
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    decoder_start_id: int = 2  # the first decoder input (bos here; pad in Marian)
    languages: tuple[str, ...] = ()  # languages the model translates between
    target_tag: str = "<2{lang}>"  # source prefix token naming the target language ("" = no tag, one direction)

    def __post_init__(self) -> None:
        for f in fields(self):  # a checkpoint's or a command line's values, checked before any arithmetic
            value, kind = getattr(self, f.name), _KINDS.get(str(f.type))
            if kind is not None and not (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
                raise ValueError(f"{f.name} must be {_KIND_NAMES[kind]}, got {value!r}")
        for name in _POSITIVE:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not isinstance(self.languages, tuple) or not all(isinstance(lang, str) for lang in self.languages):
            raise ValueError(f"languages must be language codes, got {self.languages!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position must be one of {NORM_POSITIONS}, got {self.norm_position!r}")
        if self.sinusoid_layout not in SINUSOID_LAYOUTS:
            raise ValueError(f"sinusoid_layout must be one of {SINUSOID_LAYOUTS}, got {self.sinusoid_layout!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size; set share_embeddings=False")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoidal positions, got {self.d_model}")
        for name in ("pad_id", "unk_id", "bos_id", "eos_id", "decoder_start_id"):
            value = getattr(self, name)
            if not 0 <= value < self.tgt_vocab_size:
                raise ValueError(f"{name}={value} is outside the target vocabulary (size {self.tgt_vocab_size})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def d_k(self) -> int:
        """Per-head key/value width, d_model / n_heads."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (tuples become lists)."""
        data = asdict(self)
        data["languages"] = list(self.languages)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Rebuild from ``to_dict`` output; unknown keys are an error that names them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig keys {unknown}: the checkpoint is from a newer transduce?")
        values = dict(data)
        languages = values.get("languages", ())
        values["languages"] = tuple(languages) if isinstance(languages, list | tuple) else languages
        return cls(**values)
