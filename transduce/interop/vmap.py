"""A vocabulary shortlist table written as a CTranslate2 vocabulary map (``vmap.txt``), so CTranslate2's
``use_vmap=True`` restricts the output to the same candidates as this engine (see ``transduce.engine.shortlist``):
the always-included line lists the frequent pieces, each source piece's line its co-occurrence candidates and itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transduce.engine.shortlist import ShortlistConfig, ShortlistTable


def write_vmap(
    table: ShortlistTable, key: int, pieces: Sequence[str], out: str | Path, config: ShortlistConfig | None = None
) -> int:
    """Write the ``key`` direction of ``table`` (a tag id, or ``NO_TAG``) with ``config``'s sizes; returns its lines.

    ``pieces``: the token string of every id (CTranslate2 maps tokens, not ids); control pieces (eos, unk, bos) are
    CTranslate2's fixed candidates anyway."""
    config = config or ShortlistConfig()
    if key not in table.offsets:
        raise ValueError(f"the shortlist has no direction {key} (it has {sorted(table.offsets)})")
    if len(pieces) != table.vocab_size:
        raise ValueError(f"{len(pieces)} piece strings for a {table.vocab_size}-piece shortlist")
    if any(" " in p or "\t" in p for p in pieces):
        raise ValueError("a piece contains a space or tab: it cannot be written as a vmap token")
    offsets, targets = table.offsets[key], table.targets[key]
    lines = ["\t" + " ".join(pieces[i] for i in table.frequent[key][: config.frequent])]
    for source in range(table.vocab_size):
        start = int(offsets[source])
        cands = [source, *targets[start : min(start + config.per_piece, int(offsets[source + 1]))].tolist()]
        lines.append(pieces[source] + "\t" + " ".join(pieces[i] for i in dict.fromkeys(cands)))
    Path(out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)
