"""manifest.json of an ONNX model directory: read, validate, and check file checksums."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce.engine import io_names as names
from transduce.engine.errors import ModelLoadError

FORMAT = "transduce-onnx"
FORMAT_VERSION = 3  # 2: cross K/V and encoder mask per sentence; 3: per-row positions and self-attention mask
# Bumped when the exporter writes faster or better graphs with the same interface: a cached export of the shipped
# model made by an older exporter still loads, but is made again (2: the decoder step written for one new token;
# 3: the shortlist decoder takes a per-row candidate mask; 4: masked candidates get -inf, not -1e9; 5: a CPU decoder
# with onnxruntime's fused self-attention, the base of the shortlist decoder; 6: each graph's weights in a file of
# their own beside it, which onnxruntime maps into memory instead of copying; 7: the CPU decoders gather the unscaled
# embedding table, which the engine maps once for them, the encoder and the shortlist's projection rows).
EXPORT_REVISION = 7
# the files a model directory holds, by manifest key (an export before "gather" was listed wrote gather.onnx anyway)
FILE_KEYS = {
    "encoder": names.ENCODER_FILE,
    "decoder": names.DECODER_FILE,
    "cpu_decoder": names.CPU_DECODER_FILE,  # optional: the decoder step with fused self-attention, for the CPU
    "tokenizer": names.TOKENIZER_FILE,
    "gather": names.GATHER_FILE,
    "shortlist": names.SHORTLIST_FILE,  # optional: the candidate table and projection rows
    "shortlist_decoder": names.SHORTLIST_DECODER_FILE,  # optional: the decoder with its projection as an input
}
DTYPES = ("float32", "float16", "int8-dynamic")  # of the weights; log-probs are always float32


@dataclass(frozen=True)
class Manifest:
    """What the engine needs to know about an exported model, without torch."""

    model_dir: Path
    model_name: str
    n_layers: int
    n_heads: int
    d_k: int
    vocab_size: int
    max_positions: int
    pad_id: int
    eos_id: int
    decoder_start_id: int
    languages: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    target_tag: str
    raw: dict[str, Any]
    dtype: str = "float32"  # of the weights: float32, float16 (for GPUs) or int8-dynamic (int8 MatMuls, for CPUs)

    @property
    def cache_dtype(self) -> str:
        """dtype of the encoder outputs and decoder caches: float16 for a float16 export, else float32."""
        return "float16" if self.dtype == "float16" else "float32"

    @property
    def has_shortlist(self) -> bool:
        """Whether the export holds a vocabulary shortlist and its decoder graph."""
        return "shortlist" in self.raw and "shortlist_decoder" in self.raw

    def path(self, key: str) -> Path:
        """Path of a file of the model directory by its manifest key ("encoder", "decoder", "tokenizer", "gather")."""
        return self.model_dir / str(self.raw.get(key, FILE_KEYS[key]))


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_manifest(model_dir: str | Path, *, check_files: bool = True) -> Manifest:
    """Read and validate ``model_dir/manifest.json``; every problem raises ModelLoadError saying what to fix."""
    model_dir = Path(model_dir)
    path = model_dir / names.MANIFEST_FILE
    try:
        if model_dir.exists() and not model_dir.is_dir():
            raise ModelLoadError(f"{model_dir} is a file, not a model directory (`transduce export` writes one)")
        if not model_dir.is_dir():
            raise ModelLoadError(f"model directory {model_dir} does not exist (export one with `transduce export`)")
        if not path.is_file():
            raise ModelLoadError(f"{path} is missing: {model_dir} is not a transduce ONNX model directory")
    except (OSError, ValueError) as exc:  # no permission to look inside; a name with a NUL character
        raise ModelLoadError(f"{path} cannot be read: {exc.strerror if isinstance(exc, OSError) else exc}") from exc
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ModelLoadError(f"{path} is not a {FORMAT} manifest")
    if raw.get("format_version") != FORMAT_VERSION:
        raise ModelLoadError(
            f"{path} has format version {raw.get('format_version')}, this engine reads "
            f"{FORMAT_VERSION}: re-export the model with this transduce version"
        )
    try:
        dims, special = raw["dims"], raw["special_ids"]
        manifest = Manifest(
            model_dir=model_dir,
            model_name=str(raw["model_name"]),
            n_layers=int(dims["n_decoder_layers"]),
            n_heads=int(dims["n_heads"]),
            d_k=int(dims["d_k"]),
            vocab_size=int(dims["tgt_vocab_size"]),
            max_positions=int(dims["max_positions"]),
            pad_id=int(special["pad"]),
            eos_id=int(special["eos"]),
            decoder_start_id=int(special["decoder_start"]),
            languages=tuple(raw["languages"]),
            pairs=tuple((str(a), str(b)) for a, b in raw["pairs"]),
            target_tag=str(raw["target_tag"]),
            raw=raw,
            dtype=str(raw.get("dtype", "float32")),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # (int(1e400): OverflowError)
        raise ModelLoadError(f"{path} lacks a required field or has a wrong type: {exc!r}") from exc
    if manifest.dtype not in DTYPES:
        raise ModelLoadError(f"{path} has dtype {manifest.dtype!r}; this engine reads {' or '.join(DTYPES)}")
    unknown = sorted({code for pair in manifest.pairs for code in pair} - set(manifest.languages))
    if not manifest.pairs or unknown:  # (a traceback when the start-up canary translated a pair of neither)
        problem = f"pairs in {unknown}, not among its languages {list(manifest.languages)}" if unknown else "no pairs"
        raise ModelLoadError(f"{path} lists {problem}: export the model again")
    if check_files:
        check_files_of(manifest)
    return manifest


def listed_files(manifest: Manifest) -> list[str]:
    """The files the manifest names, by key or in its checksums, sorted."""
    checksums = manifest.raw.get("checksums", {})
    keyed = {str(manifest.raw[key]) for key in FILE_KEYS if key in manifest.raw}
    return sorted(keyed | set(checksums if isinstance(checksums, dict) else ()))


def check_files_of(manifest: Manifest) -> None:
    """Every file the manifest names (by key or in its checksums) exists and matches its checksum when it has one."""
    raw, where = manifest.raw, manifest.model_dir / names.MANIFEST_FILE
    checksums = raw.get("checksums", {})
    if not isinstance(checksums, dict):
        raise ModelLoadError(f"{where}: checksums must be an object mapping file names to SHA-256 digests")
    missing = [key for key in ("encoder", "decoder", "tokenizer") if key not in raw]
    if missing:
        raise ModelLoadError(f"{where} names no {' or '.join(missing)} file: re-export the model")
    for name in listed_files(manifest):
        file = manifest.model_dir / name
        if not file.is_file():
            raise ModelLoadError(f"{file} named in {where} is missing: re-export the model")
        expected = checksums.get(name)
        if expected and sha256_file(file) != expected:
            raise ModelLoadError(
                f"{file} does not match the checksum in {where}: the file is corrupt or truncated; re-export the model"
            )


def is_stale(checkpoint: str | Path, model_dir: str | Path, shortlist: str | Path | None = None) -> bool:
    """True when ``model_dir`` is missing, exported from another checkpoint, by another export format version or
    an older exporter revision, or (``shortlist`` given) without that shortlist table."""
    manifest_path = Path(model_dir) / names.MANIFEST_FILE
    if not manifest_path.is_file():
        return True
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return True
    if not isinstance(manifest, dict):  # damaged: exported again
        return True
    source, table = manifest.get("source_checkpoint"), manifest.get("shortlist_source")
    if not isinstance(source, dict):
        return True
    if shortlist is not None and (not isinstance(table, dict) or table.get("sha256") != sha256_file(shortlist)):
        return True
    if manifest.get("export_revision") != EXPORT_REVISION:
        return True
    return bool(manifest.get("format_version") != FORMAT_VERSION or source.get("sha256") != sha256_file(checkpoint))


def spelt_as_known(known: Iterable[str], codes: Iterable[str]) -> list[str]:
    """``codes`` spelt as a model spells its languages where they differ from one by case alone (``EN`` -> ``en``,
    ``de-at`` -> ``de-AT``): a language code's case means nothing (ISO 639, BCP 47), and people type either. A code
    that matches none, or more than one by case alone, is left as given, for the pair check to name."""
    known = set(known)
    out = []
    for code in codes:
        matches = [lang for lang in known if lang.lower() == code.lower()]
        out.append(matches[0] if code not in known and len(matches) == 1 else code)
    return out
