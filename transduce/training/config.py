"""TrainConfig: every knob of a training run, saved in its checkpoints and rebuilt on resume."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

# per corpus origin (see docs/data.md): everyday, caption and news sentences first; dictionary headwords, one- or
# two-word UI labels and machine-translated WMT outputs (wmt-sys) rarely; others 1.0
DEFAULT_ORIGIN_WEIGHTS: tuple[tuple[str, float], ...] = (
    ("tatoeba", 2.0),
    ("multi30k", 3.0),
    ("wmt", 2.0),
    ("wmt-sys", 0.5),
    ("bible", 0.25),
    ("ding", 0.25),
    ("ding-word", 0.05),
    ("gettext", 0.3),
    ("gettext-label", 0.1),
    ("firefox", 0.5),
    ("firefox-label", 0.1),
    ("libreoffice", 0.3),
    ("libreoffice-label", 0.1),
    ("debian", 0.3),
    ("debian-label", 0.2),
    ("debian-doc", 0.5),
    ("debian-doc-label", 0.1),
    ("gnome-help-label", 0.2),
    ("auf-deutsch-word", 0.5),
)


@dataclass(frozen=True)
class TrainConfig:
    """Paper section 5 defaults, scaled down where a run on a small machine needs it."""

    # model (a ModelConfig is built from these plus the vocabulary)
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    dropout: float = 0.1
    vocab_size: int = 8000
    languages: tuple[str, ...] = ("de", "en")
    max_positions: int = 512
    # data
    max_tokens: int = 4096  # padded source+target tokens per batch (length-bucketed)
    max_len: int = 128  # examples longer than this (pieces, either side) are skipped
    origin_weights: tuple[tuple[str, float], ...] = DEFAULT_ORIGIN_WEIGHTS  # sampling weight per origin (default 1)
    tokenizer_sample: int = 400_000  # sentences used to train SentencePiece
    # optimisation (section 5.3): Adam b1=0.9 b2=0.98 eps=1e-9, lr = scale * d^-0.5 * min(s^-0.5, s * w^-1.5)
    lr_scale: float = 1.0
    warmup_steps: int = 400  # the paper's 4000 of 100k steps is 4%; scale to the planned run
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # 0 disables
    # run
    max_steps: int = 0  # 0 = no step limit
    max_minutes: float = 0.0  # 0 = no time limit; the run stops cleanly with a final checkpoint
    checkpoint_minutes: float = 10.0
    keep_checkpoints: int = 5
    average_last: int = 4  # checkpoints averaged into average.pt at the end
    eval_examples: int = 400  # dev examples per direction for dev loss
    bleu_sentences: int = 100  # dev sentences per direction for greedy dev BLEU (0 disables)
    seed: int = 1
    init_from: str = ""  # a checkpoint to start from (its tokenizer and dimensions replace the ones above); "" = none
    precision: str = "auto"  # auto (bf16 autocast on CPU, fp16/bf16 on CUDA) | fp32
    threads: int = 0  # torch CPU threads (0 = all cores)

    def __post_init__(self) -> None:
        if self.max_tokens < self.max_len * 2:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must hold at least one example of max_len "
                f"({self.max_len}) on both sides"
            )
        if self.precision not in ("auto", "fp32"):
            raise ValueError(f"precision must be auto or fp32, got {self.precision!r}")
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1, got {self.vocab_size}")
        if self.warmup_steps < 1 or self.lr_scale <= 0:
            raise ValueError("warmup_steps must be >= 1 and lr_scale > 0")
        # checked here, before the tokenizer is trained (a minute and more), not when the model or the loss is built
        if self.max_steps < 0 or not 0 <= self.max_minutes < float("inf"):  # (-1 wrote an untrained model, exit 0)
            raise ValueError(
                "max_steps and max_minutes must be finite and >= 0 (0 = no limit), "
                f"got {self.max_steps}, {self.max_minutes}"
            )
        if self.keep_checkpoints < 1 or self.average_last < 1:
            raise ValueError(
                f"keep_checkpoints and average_last must be >= 1, got {self.keep_checkpoints}, {self.average_last}"
            )
        if not (0 <= self.label_smoothing < 1 and 0 <= self.dropout < 1):
            raise ValueError(
                f"label_smoothing and dropout must be >= 0 and < 1, got {self.label_smoothing}, {self.dropout}"
            )
        if self.n_heads < 1 or self.d_model % self.n_heads:
            raise ValueError(f"n_heads must be >= 1 and divide d_model ({self.d_model}), got {self.n_heads}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0 = all cores), got {self.threads}")
        sizes = ("d_model", "d_ff", "n_encoder_layers", "n_decoder_layers", "max_positions", "max_len")
        for name in (*sizes, "tokenizer_sample"):  # (0 failed after the tokenizer, or inside SentencePiece)
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_positions < self.max_len + 2:  # (an IndexError in the positional encoding at the first step)
            raise ValueError(
                f"max_positions ({self.max_positions}) must hold an example of max_len ({self.max_len}) pieces plus "
                f"its tag and end: at least {self.max_len + 2}"
            )
        if self.eval_examples < 1 or self.bleu_sentences < 0:  # (0 dev examples reported a dev loss of 0.0)
            raise ValueError(
                f"eval_examples must be >= 1 and bleu_sentences >= 0 (0 = no BLEU), got {self.eval_examples}, "
                f"{self.bleu_sentences}"
            )
        if not (math.isfinite(self.lr_scale) and 0 <= self.checkpoint_minutes < math.inf and self.clip_norm >= 0):
            raise ValueError(  # (lr_scale nan trained on: "nan <= 0" is false)
                "lr_scale must be a finite number, checkpoint_minutes finite and >= 0, clip_norm >= 0, got "
                f"{self.lr_scale}, {self.checkpoint_minutes}, {self.clip_norm}"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        data = asdict(self)
        data["languages"] = list(self.languages)
        data["origin_weights"] = [list(x) for x in self.origin_weights]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of to_dict; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        if set(data) - known:
            raise ValueError(f"unknown TrainConfig keys {sorted(set(data) - known)}")
        values = dict(data)
        values["languages"] = tuple(values.get("languages", ()))
        values["origin_weights"] = tuple(tuple(x) for x in values.get("origin_weights", ()))
        return cls(**values)


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Eq. 3 of the paper: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


ALL_CHECKPOINTS = 1_000_000  # keep_checkpoints / average_last of a run saved with 0, which kept and averaged all
RUN_LIMITS = ("max_steps", "max_minutes")  # a resumed run always takes the ones given now (the run's totals)
MACHINE_OPTIONS = ("threads", "checkpoint_minutes")  # a resumed run takes them when named: where it runs, not what


def resumed_config(saved: Mapping[str, Any], given: TrainConfig, named: Collection[str] = ()) -> TrainConfig:
    """The config of a run resumed from its ``saved`` one: the run limits of ``given``, the options of
    MACHINE_OPTIONS that are ``named`` (on the command line), every other option the run's own. Values saved before
    they were refused are made sound first, so such a run is not locked out."""
    values = dict(saved)
    for name in ("keep_checkpoints", "average_last"):
        if values.get(name) == 0:  # (only a saved 0 meant all: a missing one is the default)
            values[name] = ALL_CHECKPOINTS
    for name in ("eval_examples", "bleu_sentences"):  # saved values refused since 2026-11-27: the ones given
        if not isinstance(values.get(name), int) or values[name] < (1 if name == "eval_examples" else 0):
            values[name] = getattr(given, name)
    if isinstance(values.get("max_len"), int) and isinstance(values.get("max_positions"), int):
        values["max_len"] = min(values["max_len"], values["max_positions"] - 2)  # (it trained: skip longer ones)
    taken = [*RUN_LIMITS, *(name for name in MACHINE_OPTIONS if name in named)]
    return TrainConfig.from_dict({**values, **{name: getattr(given, name) for name in taken}})


def ignored_options(given: TrainConfig, used: TrainConfig, named: Collection[str]) -> list[str]:
    """``--option VALUE (VALUE used)`` for each option ``named`` on the command line whose value in ``given`` the
    run does not use: a resumed run keeps its own, a warm start takes the checkpoint's dimensions. Languages are a
    set, origin weights a weight per origin (1 where none is given): only the origins whose weight differs show."""

    def shown(name: str, value: Any) -> str:
        if name in ("keep_checkpoints", "average_last") and value >= ALL_CHECKPOINTS:
            return "all"
        if name == "languages":
            return ",".join(value)
        return str(value) if value != "" else "none"

    ignored = []
    for name in sorted(n for n in named if hasattr(given, n)):
        mine, theirs = getattr(given, name), getattr(used, name)
        if name == "languages" and sorted(mine) != sorted(theirs):
            ignored.append(f"--languages {shown(name, mine)} ({shown(name, theirs)} used)")
        elif name == "origin_weights":
            weights, run = dict(mine), dict(theirs)
            changed = sorted(k for k in {*weights, *run} if weights.get(k, 1.0) != run.get(k, 1.0))
            if changed:
                ignored.append(
                    f"--origin-weights {','.join(f'{k}={weights.get(k, 1.0):g}' for k in changed)} "
                    f"({','.join(f'{k}={run.get(k, 1.0):g}' for k in changed)} used)"
                )
        elif name not in ("languages", "origin_weights") and mine != theirs:
            ignored.append(f"--{name.replace('_', '-')} {shown(name, mine)} ({shown(name, theirs)} used)")
    return ignored
