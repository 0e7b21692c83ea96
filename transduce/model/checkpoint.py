"""Checkpoint I/O: one file holding the ModelConfig, the weights, the tokenizer and free-form metadata."""

from __future__ import annotations

import errno
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer
from transduce.paths import replacing_file
from transduce.tokenizer import Tokenizer

FORMAT = "transduce-checkpoint"
FORMAT_VERSION = 1


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model in eval mode, its config, tokenizer bytes and metadata."""

    model: Transformer
    config: ModelConfig
    tokenizer_model: bytes
    meta: dict[str, Any] = field(default_factory=dict)

    def tokenizer(self) -> Tokenizer:
        """The checkpoint's tokenizer with the model's language tags."""
        return Tokenizer(self.tokenizer_model, target_tag=self.config.target_tag, languages=self.config.languages)


def _tied_keys(model: Transformer) -> set[str]:
    """State-dict keys that alias another parameter (not stored twice)."""
    keys = {"generator.weight"}
    if model.config.share_embeddings:
        keys.add("tgt_embed.weight")
    return keys


def save_checkpoint(
    path: str | Path,
    model: Transformer,
    tokenizer_model: bytes,
    *,
    meta: dict[str, Any] | None = None,
    dtype: torch.dtype | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the model (optionally cast to ``dtype``, e.g. float16) atomically; ``extra`` holds e.g. optimizer state."""
    tied = _tied_keys(model)
    state = {
        k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().clone()
        for k, v in model.state_dict().items()
        if k not in tied
    }
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_config": model.config.to_dict(),
        "state_dict": state,
        "tokenizer_model": tokenizer_model,
        "meta": dict(meta or {}),
        **(extra or {}),
    }
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory: name the checkpoint file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with replacing_file(path) as tmp:
            torch.save(payload, tmp)
    except RuntimeError as exc:  # torch's writer reports an unwritable place so
        raise OSError(f"cannot write {path}: {first_line(exc)}") from exc


def check_checkpoint_path(path: str | Path) -> None:
    """ValueError unless ``path`` is a file: a directory, or nothing, is named as such."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint {path} is a directory: name the checkpoint file (.pt) in it")
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist")


def load_raw(path: str | Path) -> dict[str, Any]:
    """The checkpoint's dictionary, checked for format; raises ValueError with a readable message."""
    path = Path(path)
    check_checkpoint_path(path)
    problem = _not_torch(path)
    if problem is not None:
        raise ValueError(f"{path} is not a transduce checkpoint, or is damaged ({problem})")
    try:
        with warnings.catch_warnings():  # (torch warns of a pickle protocol before it refuses a foreign file)
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for corrupt files
        # one line, and never torch's advice to load it with weights_only=False (which would run its code)
        raise ValueError(f"{path} is not a transduce checkpoint, or is damaged ({unreadable(exc)})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a transduce checkpoint")
    if payload.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(
            f"{path} has format version {payload['format_version']}; this transduce reads <= {FORMAT_VERSION}"
        )
    return payload


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Rebuild the model from its saved config and load the weights (as float32) in eval mode."""
    payload = load_raw(path)
    absent = [key for key in ("model_config", "state_dict", "tokenizer_model") if key not in payload]
    if absent:
        raise ValueError(f"checkpoint {path} is incomplete: it has no {', '.join(absent)}")
    meta = payload.get("meta", {})
    if not isinstance(payload["model_config"], dict) or not isinstance(payload["state_dict"], dict):
        raise ValueError(f"checkpoint {path} is damaged: its model_config and state_dict must be mappings")
    if not isinstance(meta, dict) or not isinstance(payload["tokenizer_model"], bytes):
        raise ValueError(f"checkpoint {path} is damaged: its meta must be a mapping and its tokenizer_model bytes")
    try:
        config = ModelConfig.from_dict(payload["model_config"])
        model = Transformer(config)
        state = {k: (v.float() if v.is_floating_point() else v) for k, v in payload["state_dict"].items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
    except (KeyError, TypeError, ZeroDivisionError, RuntimeError, AttributeError) as exc:
        raise ValueError(f"checkpoint {path} has a model_config that does not fit: {first_line(exc)}") from exc
    missing = [k for k in missing if k not in _tied_keys(model)]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match its config: missing {missing}, unexpected {unexpected}")
    model.eval()
    return Checkpoint(model, config, payload["tokenizer_model"], meta)


_SIGNATURES = (  # what a file given as a checkpoint turned out to be, by its first bytes
    (b"version https://git-lfs", "it is a Git LFS pointer, not the file: fetch it with `git lfs pull`"),
    (b"\x1f\x8b", "it is gzip-compressed: decompress it first"),
    (b"<", "it is text (an HTML or XML page?), not a torch file"),
)
_ARCHIVE_CUT = "its zip archive is cut short or damaged, as a copy or save that did not finish leaves it; copy it again"


def _not_torch(path: Path) -> str | None:
    """Why ``path`` cannot be a torch checkpoint, from its first bytes and (a zip archive, as torch saves) its
    members' checksums, which torch.load never checks (a flipped byte loaded as a wrong weight); None when it may be
    one."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
        if head.startswith(b"PK\x03\x04"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
            return f"{bad} inside it fails its checksum: the file is damaged; copy it again" if bad else None
    except zipfile.BadZipFile:
        return _ARCHIVE_CUT
    except (OSError, RuntimeError, EOFError) as exc:  # (zipfile: RuntimeError for an encrypted member)
        return f"{type(exc).__name__}: {exc}"
    if not head or head.startswith(b"\x80"):  # empty, or a pickle (torch's legacy format): torch.load says
        return None
    if not head.strip(b"\0"):
        return "it holds only zero bytes: a copy or save that did not finish; copy it again"
    return next((why for sign, why in _SIGNATURES if head.startswith(sign)), "it is not a torch file")


def unreadable(exc: BaseException) -> str:
    """Why torch.load could not read a file, in one line; in our words where the cause is known."""
    text = str(exc)
    if "weights_only" in text:  # never torch's advice to load it with weights_only=False (which would run its code)
        return f"{type(exc).__name__}: it holds objects a checkpoint never has"
    if not text.strip() or isinstance(exc, KeyError):  # ("EOFError: " for an empty file, "KeyError: 101")
        return f"{type(exc).__name__}: it is empty, cut short or not a torch file"
    # a zip archive cut short: miniz's message and advice (cut at 300 characters), or "[Errno 22] Invalid argument"
    if "PytorchStreamReader failed" in text or (isinstance(exc, OSError) and exc.errno == errno.EINVAL):
        return _ARCHIVE_CUT
    return first_line(exc)


def first_line(exc: BaseException) -> str:
    """An exception as one short line: its type, and its message's first lines (torch's run to dozens)."""
    text = " ".join(line.strip() for line in str(exc).splitlines()[:2] if line.strip())
    return f"{type(exc).__name__}: {text[:300]}"
