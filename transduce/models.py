"""Where the shipped default model lives, and exporting it to ONNX on first use (or when stale)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = REPO_ROOT / "models" / "default" / "checkpoint.pt"
DEFAULT_EXPORT_DIR = REPO_ROOT / "artifacts" / "default-onnx"

log = logging.getLogger("transduce")


def resolve_model_dir(model_dir: str | Path | None) -> Path:
    """``model_dir`` if given; else the default model's ONNX directory, exported first if missing or stale."""
    if model_dir:
        return Path(model_dir)
    out = Path(os.environ.get("TRANSDUCE_DEFAULT_EXPORT_DIR", DEFAULT_EXPORT_DIR))
    checkpoint = Path(os.environ.get("TRANSDUCE_DEFAULT_CHECKPOINT", DEFAULT_CHECKPOINT))
    if not checkpoint.is_file():
        return out  # e.g. a serving image that ships only the exported directory
    try:
        from export.onnx_export import export_model, is_stale
    except ImportError:  # no torch here: serve whatever was exported before
        return out
    if is_stale(checkpoint, out):
        log.info("exporting the default model %s to %s (first start or checkpoint changed)", checkpoint, out)
        export_model(checkpoint, out)
    return out
