"""One function reorders every layer's cache (and any other per-row tensor) for beams and finished rows."""

from __future__ import annotations

import numpy as np


def reorder(tensors: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    """Gather axis 0 (rows) of every tensor: ``out[name][j] = tensors[name][rows[j]]``."""
    return {name: np.take(value, rows, axis=0) for name, value in tensors.items()}


def unless_identity(index: np.ndarray, n: int) -> np.ndarray | None:
    """``index`` (a gather along axis 0 of n rows), or None when it keeps every row in place (no copy needed)."""
    if len(index) == n and np.array_equal(index, np.arange(n)):
        return None
    return index
