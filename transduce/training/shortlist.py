"""``transduce shortlist``: the vocabulary shortlist table of a model, from co-occurrence counts on its corpus.

For every translation direction and every source piece s, the target pieces t that co-occur with it in the sentence
pairs are ranked by their Dice coefficient 2 c(s, t) / (c(s) + c(t)) (pair counts; pairs seen once are noise and
dropped); the most frequent target pieces of each language are stored too. See ``transduce.engine.shortlist``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transduce.engine.shortlist import NO_TAG, ShortlistTable
from transduce.tokenizer import Tokenizer

CHUNK = 20_000  # sentence pairs per counting chunk (bounds the memory of one bincount)


@dataclass(frozen=True)
class ShortlistBuildConfig:
    """Sizes of the stored table (the engine may use fewer per piece)."""

    max_pairs: int = 400_000  # sentence pairs sampled from train.tsv
    per_piece: int = 50  # candidates stored per source piece
    frequent: int = 1000  # most frequent pieces stored per target language
    min_count: int = 2  # pairs a (source, target) piece pair must co-occur in
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_pairs", "per_piece", "frequent", "min_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


def read_pairs(corpus: Path, max_pairs: int, seed: int) -> tuple[tuple[str, str], list[tuple[str, str]]]:
    """The two language codes of ``corpus/train.tsv`` and up to ``max_pairs`` of its pairs (a seeded sample)."""
    path = corpus / "train.tsv"
    if not path.is_file():
        raise ValueError(f"{path} is missing: pass a corpus directory from `transduce data build`")
    try:
        return _read_pairs(path, max_pairs, seed)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _read_pairs(path: Path, max_pairs: int, seed: int) -> tuple[tuple[str, str], list[tuple[str, str]]]:
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if len(header) != 3:
            raise ValueError(f"{path} must have three columns (origin, lang, lang), its header is {header}")
        rows = []
        for n, line in enumerate(f, 2):
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) == 3:
                rows.append(cols[1:])
            elif line.strip():  # a blank line is skipped; a ragged one means a damaged corpus, never read around
                raise ValueError(f"{path}: line {n} has {len(cols)} columns, the header 3: fix or remove it")
    if not rows:
        raise ValueError(f"{path} has no sentence pairs")
    if len(rows) > max_pairs:
        rows = random.Random(seed).sample(rows, max_pairs)
    return (header[1], header[2]), [(a, b) for a, b in rows]


def cooccurrence(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], vocab_size: int) -> np.ndarray:
    """(V, V) counts: entry [a, b] = pairs whose first side has piece a and second side piece b (each once)."""
    counts = np.zeros(vocab_size * vocab_size, dtype=np.int64)
    for start in range(0, len(pairs), CHUNK):
        keys = [
            (np.unique(np.asarray(a, np.int64))[:, None] * vocab_size + np.unique(np.asarray(b, np.int64))[None, :])
            for a, b in pairs[start : start + CHUNK]
            if len(a) and len(b)
        ]
        if keys:
            counts += np.bincount(np.concatenate([k.ravel() for k in keys]), minlength=vocab_size * vocab_size)
    return counts.reshape(vocab_size, vocab_size)


def ranked_candidates(
    counts: np.ndarray, source_freq: np.ndarray, target_freq: np.ndarray, per_piece: int, min_count: int
) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets (V + 1,), targets) of each source piece's best targets by Dice, best first, ties to lower ids."""
    V = counts.shape[0]
    lists: list[np.ndarray] = []
    for start in range(0, V, 512):
        block = counts[start : start + 512].astype(np.float64)  # (b, V)
        dice = 2 * block / (source_freq[start : start + 512, None] + target_freq[None, :] + 1e-9)
        dice[block < min_count] = 0
        for row in dice:
            nonzero = np.flatnonzero(row)
            best = nonzero[np.lexsort((nonzero, -row[nonzero]))][:per_piece]
            lists.append(best)
    offsets = np.zeros(V + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in lists])
    targets = np.concatenate(lists).astype(np.int32) if offsets[-1] else np.zeros(0, np.int32)
    return offsets, targets


def directions(
    columns: tuple[str, str], tokenizer: Tokenizer, model_pairs: Sequence[tuple[str, str]]
) -> list[tuple[int, int, int]]:
    """(source column, target column, table key) of every model direction the corpus columns hold."""
    out = []
    for src, tgt in model_pairs:
        if {src, tgt} != set(columns) or src == tgt:
            continue
        tag = tokenizer.tag_id(tgt) if tokenizer.target_tag else None
        out.append((columns.index(src), columns.index(tgt), NO_TAG if tag is None else tag))
    if not out:
        raise ValueError(f"the corpus holds {columns[0]}/{columns[1]}, none of the model's pairs {list(model_pairs)}")
    return out


def build_table(
    pairs: Sequence[tuple[str, str]],
    tokenizer: Tokenizer,
    wanted: Sequence[tuple[int, int, int]],
    config: ShortlistBuildConfig | None = None,
) -> ShortlistTable:
    """The table of the ``wanted`` directions (source column, target column, key; see ``directions``)."""
    config = config or ShortlistBuildConfig()
    V = tokenizer.vocab_size
    ids = [(tokenizer.encode(a), tokenizer.encode(b)) for a, b in pairs]
    counts = cooccurrence(ids, V)  # [first-column piece, second-column piece]
    side_freq = [np.zeros(V, np.float64), np.zeros(V, np.float64)]  # pairs containing the piece, per column
    token_freq = [np.zeros(V, np.int64), np.zeros(V, np.int64)]  # occurrences, per column
    for side in (0, 1):
        seqs = [np.asarray(pair[side], np.int64) for pair in ids]
        if seqs:
            side_freq[side] += np.bincount(np.concatenate([np.unique(s) for s in seqs]), minlength=V)
            token_freq[side] += np.bincount(np.concatenate(seqs), minlength=V)
    frequent, offsets, targets = {}, {}, {}
    for src, tgt, key in wanted:
        matrix = counts if src == 0 else counts.T
        offsets[key], targets[key] = ranked_candidates(
            matrix, side_freq[src], side_freq[tgt], config.per_piece, config.min_count
        )
        order = np.lexsort((np.arange(V), -token_freq[tgt]))
        frequent[key] = order[token_freq[tgt][order] > 0][: config.frequent].astype(np.int32)
    return ShortlistTable(V, frequent, offsets, targets)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``transduce shortlist``."""
    parser.add_argument("--data", required=True, help="corpus directory from `transduce data build` (its train.tsv)")
    parser.add_argument("--checkpoint", required=True, help="the model's checkpoint (its tokenizer and pairs)")
    parser.add_argument(
        "--out",
        default=None,
        help="table to write (default: shortlist.npz beside the checkpoint, where export finds it)",
    )
    defaults = ShortlistBuildConfig()
    parser.add_argument("--max-pairs", type=int, default=defaults.max_pairs, help="sentence pairs sampled")
    parser.add_argument("--per-piece", type=int, default=defaults.per_piece, help="candidates stored per source piece")
    parser.add_argument("--frequent", type=int, default=defaults.frequent, help="frequent pieces stored per language")


def run(args: argparse.Namespace) -> int:
    """Build and write the table; errors are one line on stderr: exit status 2 for a bad option, else 1."""
    from transduce.export.onnx_export import language_pairs
    from transduce.model.checkpoint import check_checkpoint_path, load_checkpoint
    from transduce.paths import check_file_target, check_output

    started = time.monotonic()
    try:
        config = ShortlistBuildConfig(max_pairs=args.max_pairs, per_piece=args.per_piece, frequent=args.frequent)
    except ValueError as exc:  # a bad option: 2, as in every command (a table that cannot be built is 1)
        print(f"transduce shortlist: {exc}", file=sys.stderr)
        return 2
    try:
        checkpoint = Path(args.checkpoint)
        check_checkpoint_path(checkpoint)  # before the table's output is checked against it
        out = Path(args.out) if args.out else checkpoint.parent / "shortlist.npz"
        check_output(out, [checkpoint, Path(args.data) / "train.tsv"], what="the table")
        check_file_target(out, what="--out")
        ckpt = load_checkpoint(checkpoint)
        tokenizer = ckpt.tokenizer()
        columns, pairs = read_pairs(Path(args.data), config.max_pairs, config.seed)
        wanted = directions(columns, tokenizer, [(a, b) for a, b in language_pairs(ckpt)])
        table = build_table(pairs, tokenizer, wanted, config)
        table.save(out)
    except (ValueError, OSError) as exc:
        print(f"transduce shortlist: {exc}", file=sys.stderr)
        return 1
    sizes = {key: int(table.offsets[key][-1]) for key in table.offsets}
    print(
        f"wrote {out}: {len(pairs)} pairs, {len(wanted)} direction(s), candidates stored per direction {sizes}, "
        f"{out.stat().st_size / 1e6:.1f} MB, {time.monotonic() - started:.0f} s"
    )
    return 0
