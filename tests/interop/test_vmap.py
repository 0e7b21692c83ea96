"""The vocabulary shortlist written as a CTranslate2 vocabulary map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from transduce.engine.shortlist import ShortlistConfig, ShortlistTable
from transduce.interop.vmap import write_vmap


def test_vmap_lines_hold_frequent_then_each_piece_with_its_candidates(tmp_path: Path) -> None:
    V = 6
    offsets = np.array([0, 0, 0, 0, 0, 3, 3])  # piece 4 -> [5, 4, 2]
    table = ShortlistTable(V, {9: np.array([2, 3, 1])}, {9: offsets}, {9: np.array([5, 4, 2])})
    pieces = ["<pad>", "<unk>", "▁a", "b", "▁c", "d"]
    out = tmp_path / "vmap.txt"
    assert write_vmap(table, 9, pieces, out, ShortlistConfig(frequent=2, per_piece=2)) == 1 + V
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "\t▁a b"
    assert lines[5] == "▁c\t▁c d"  # itself first, then its 2 best candidates without repeating itself
    assert lines[1 + 2] == "▁a\t▁a"
    with pytest.raises(ValueError, match="no direction"):
        write_vmap(table, 7, pieces, out)
    with pytest.raises(ValueError, match="space or tab"):
        write_vmap(table, 9, [*pieces[:-1], "d e"], out)
