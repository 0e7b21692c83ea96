"""The shipped default model: its checkpoint (package data) and its ONNX export, made once into a cache directory.

Only the command line resolves the default model; the service and the engine are always given a model directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from transduce.engine.errors import ModelLoadError
from transduce.engine.manifest import check_files_of, is_stale, listed_files, load_manifest
from transduce.engine.shortlist import sibling_table
from transduce.paths import user_cache_dir

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights" / "default"
DEFAULT_CHECKPOINT = WEIGHTS_DIR / "checkpoint.pt"
EXPORT_DIR_ENV = "TRANSDUCE_DEFAULT_EXPORT_DIR"
TORCH_INSTALL = "pip install 'transduce[torch]' --extra-index-url https://download.pytorch.org/whl/cpu"
STAMP_FILE = ".verified.json"  # in the user cache's export: each file's size and time when its checksum last matched

log = logging.getLogger("transduce")


class ModelUnavailableError(Exception):
    """No model directory was given and the shipped one cannot be made here; the message says what to do."""


def default_checkpoint() -> Path:
    """The shipped checkpoint (``TRANSDUCE_DEFAULT_CHECKPOINT`` overrides it)."""
    return Path(os.environ.get("TRANSDUCE_DEFAULT_CHECKPOINT") or DEFAULT_CHECKPOINT)


def default_export_dir() -> Path:
    """Where the shipped model's ONNX export is cached: ``TRANSDUCE_DEFAULT_EXPORT_DIR``, else the user cache."""
    if os.environ.get(EXPORT_DIR_ENV):
        return Path(os.environ[EXPORT_DIR_ENV])
    return user_cache_dir() / "default-onnx"


def resolve_model_dir(model_dir: str | Path | None) -> Path:
    """``model_dir`` if given; else the shipped model's ONNX directory, exported first when missing or stale.

    Raises ModelUnavailableError (one actionable line) when the export is needed but PyTorch is not installed."""
    if model_dir:
        return Path(model_dir)
    checkpoint, out = default_checkpoint(), default_export_dir()
    if not checkpoint.is_file():
        raise ModelUnavailableError(
            f"the shipped model {checkpoint} is missing: pass --model DIR (a model directory from `transduce export`)"
        )
    shortlist = sibling_table(checkpoint)
    own = not os.environ.get(EXPORT_DIR_ENV)  # the user cache: the project's own directory, replaced whatever it holds
    if not is_stale(checkpoint, out, shortlist):
        damage = _damage(out, stamp=own)
        if damage is None:
            return out
        log.warning("the shipped model's export is damaged (%s): exporting it again", damage)
    try:
        from transduce.export.onnx_export import ExportConfig, export_model
    except ImportError:
        raise ModelUnavailableError(
            "the shipped model is exported to ONNX once on first use, which needs PyTorch: "
            f"`{TORCH_INSTALL}`, or pass --model DIR (a model directory from `transduce export`)"
        ) from None
    log.info("exporting the shipped model %s to %s (first use or checkpoint changed)", checkpoint, out)
    export_model(checkpoint, out, ExportConfig(shortlist=shortlist), own_dir=own)
    return out


def _damage(model_dir: Path, *, stamp: bool) -> str | None:
    """Why the export in ``model_dir`` cannot be loaded (a file missing, or not matching its checksum), or None.
    With ``stamp`` the files are hashed only when one changed since they last matched (``STAMP_FILE``: its size,
    times and inode; a change in place restores no ctime): a command's start would otherwise read the model twice,
    here and when it loads."""
    try:
        manifest = load_manifest(model_dir, check_files=False)
        seen = {name: _stat(model_dir / name) for name in listed_files(manifest)}
    except (ModelLoadError, KeyError, TypeError, OSError) as exc:
        return str(exc)
    try:
        if stamp and json.loads((model_dir / STAMP_FILE).read_text(encoding="utf-8")) == seen:
            return None
    except (OSError, ValueError):
        pass
    try:
        check_files_of(manifest)
    except ModelLoadError as exc:
        return str(exc)
    if stamp:
        with contextlib.suppress(OSError):  # (a read-only cache: hashed again next time)
            (model_dir / STAMP_FILE).write_text(json.dumps(seen), encoding="utf-8")
    return None


def _stat(path: Path) -> list[int]:
    """What changes when a file is written, replaced or has its times restored: size, mtime, ctime, inode."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
