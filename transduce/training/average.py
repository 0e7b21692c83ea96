"""Checkpoint averaging (the paper averages the last 5 or 20 checkpoints)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from transduce.model.checkpoint import first_line, load_raw
from transduce.paths import replacing_file


def average_checkpoints(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Write a checkpoint whose floating-point weights are the mean of ``paths`` (config/tokenizer from the last)."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint")
    payloads = [load_raw(p) for p in paths]
    configs = {str(p["model_config"]) for p in payloads}
    if len(configs) != 1:
        raise ValueError("checkpoints to average must share one ModelConfig")
    last = payloads[-1]
    state = {}
    for key, value in last["state_dict"].items():
        if value.is_floating_point():
            state[key] = (sum(p["state_dict"][key].double() for p in payloads) / len(payloads)).to(value.dtype)
        else:
            state[key] = value
    averaged = {k: v for k, v in last.items() if k not in ("optimizer", "rng")}
    averaged["state_dict"] = state
    averaged["meta"] = {**last.get("meta", {}), "averaged_checkpoints": [Path(p).name for p in paths]}
    out = Path(out)
    try:
        with replacing_file(out) as tmp:
            torch.save(averaged, tmp)
    except RuntimeError as exc:  # torch's writer reports a full disk so (as save_checkpoint turns it)
        raise OSError(f"cannot write {out}: {first_line(exc)}") from exc
    return out
