"""Optimum's onnxruntime models as a contender: optimum-onnx pins transformers<4.58 (and fails to import on 5.x), so
they run in their own subprocess from a side directory of pinned packages, never installed into the environment."""

from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.pool
import subprocess
import sys
from pathlib import Path

from transduce.export.files import replacing_dir

# optimum-onnx 0.1.0 and the newest versions its pins allow (resolved with pip against this environment)
STACK = (
    "optimum-onnx==0.1.0",
    "optimum==2.1.0",
    "transformers==4.57.6",
    "huggingface-hub==0.36.2",
    "tokenizers==0.22.2",
)
MARKER = "transduce-stack.json"


def ensure_site(site: Path) -> Path:
    """``site`` with STACK installed (``pip install --target``, no dependencies: torch, onnx, onnxruntime and the rest
    come from this environment); installed once, reused while its marker names the same STACK."""
    marker = site / MARKER
    if marker.is_file() and json.loads(marker.read_text()) == list(STACK):
        return site
    with replacing_dir(site, marker=None) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(tmp),
            *STACK,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"cannot install {' '.join(STACK)} into {site}: {tail[0]}")
        (tmp / MARKER).write_text(json.dumps(list(STACK)))
    return site


def _prepend(site: str) -> None:
    sys.path.insert(0, site)


def site_pool(site: Path) -> multiprocessing.pool.Pool:
    """A one-process pool (fresh interpreter) that imports from ``site`` before anything else."""
    return mp.get_context("spawn").Pool(1, initializer=_prepend, initargs=(str(site),))


def site_versions() -> dict[str, str]:
    """The versions of transformers and optimum a process imports (in site_pool: the pinned STACK)."""
    from importlib.metadata import version

    import transformers

    return {"transformers": str(transformers.__version__), "optimum-onnx": version("optimum-onnx")}


def export_optimum(hf_dir: Path, out: Path) -> None:
    """Optimum's own ONNX export (encoder, decoder, decoder with past) of a Marian directory; run inside site_pool."""
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    with replacing_dir(out, marker=None) as tmp:
        ORTModelForSeq2SeqLM.from_pretrained(hf_dir, export=True, use_cache=True, use_merged=False).save_pretrained(tmp)
