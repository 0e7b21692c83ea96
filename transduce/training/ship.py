"""Write a run's averaged checkpoint (or last.pt without one) as the fp16 checkpoint that is shipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from transduce.model.checkpoint import load_checkpoint, save_checkpoint


def ship_fp16(run_dir: Path, out: Path, candidates: tuple[str, ...] = ("average.pt", "last.pt")) -> dict[str, Any]:
    """Write ``out`` (fp16) from the first existing candidate; returns what was shipped."""
    for name in candidates:
        path = run_dir / name
        if path.is_file():
            ckpt = load_checkpoint(path)
            save_checkpoint(out, ckpt.model, ckpt.tokenizer_model, meta=ckpt.meta, dtype=torch.float16)
            return {"from": name, "path": str(out), "bytes": out.stat().st_size}
    raise FileNotFoundError(f"no checkpoint in {run_dir} (looked for {candidates})")
