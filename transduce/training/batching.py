"""Examples (bidirectional, tagged), length-bucketed token-count batches and their padded tensors."""

from __future__ import annotations

import csv
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from transduce.tokenizer import Tokenizer


@dataclass(frozen=True)
class Example:
    """Source ids (tag + pieces + eos) and target ids (pieces); the origin selects a sampling weight."""

    src: np.ndarray
    tgt: np.ndarray
    origin: str


def corpus_language(path: str | Path) -> str:
    """The non-English language of a corpus TSV, from its header ``origin<TAB>en<TAB>xx`` (``de`` for en-de)."""
    with open(path, encoding="utf-8", newline="") as f:
        header = f.readline().rstrip("\r\n").split("\t")
    if len(header) < 3 or header[:2] != ["origin", "en"] or not header[2]:
        raise ValueError(f"{path}: expected header origin/en/<language>, got {header}")
    return header[2]


def read_pairs(path: str | Path) -> list[tuple[str, str, str]]:
    """(origin, en, xx) rows of a corpus TSV whose header is ``origin<TAB>en<TAB>xx`` (xx: de, fr, ...)."""
    corpus_language(path)  # checks the header
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        return [(r[0], r[1], r[2]) for r in reader if len(r) >= 3]


def check_sampled(path: str | Path, weights: dict[str, float]) -> None:
    """ValueError unless the corpus TSV at ``path`` has a pair whose origin ``weights`` (default 1) keeps: a run
    whose every epoch is empty would train nothing."""
    corpus_language(path)  # checks the header
    origins: set[str] = set()
    with open(path, encoding="utf-8", newline="") as f:
        next(f)
        for line in f:
            parts = line.split("\t", 2)
            if len(parts) == 3:
                origins.add(parts[0])
    if not origins:
        raise ValueError(f"{path} has no pairs (build the corpus with `transduce data build`)")
    if not any(weights.get(origin, 1.0) > 0 for origin in origins):
        raise ValueError(
            f"every origin of {path} is weighted 0 ({', '.join(sorted(origins))}): give one a weight above 0 "
            "(--origin-weights)"
        )


def make_examples(
    rows: list[tuple[str, str, str]], tokenizer: Tokenizer, max_len: int, lang: str = "de"
) -> list[Example]:
    """Two examples per pair, en->xx (<2xx> tag, xx = ``lang``) and xx->en (<2en> tag); over-long ones are
    skipped."""
    out = []
    en_ids = tokenizer.sp.EncodeAsIds([r[1] for r in rows])
    de_ids = tokenizer.sp.EncodeAsIds([r[2] for r in rows])
    eos = tokenizer.eos_id
    tag_de, tag_en = tokenizer.tag_id(lang), tokenizer.tag_id("en")
    for (origin, _, _), en, de in zip(rows, en_ids, de_ids, strict=True):
        if 0 < len(en) <= max_len and 0 < len(de) <= max_len:
            out.append(Example(np.array([tag_de, *en, eos], np.int32), np.array(de, np.int32), origin))
            out.append(Example(np.array([tag_en, *de, eos], np.int32), np.array(en, np.int32), origin))
    return out


def token_batches(
    examples: list[Example],
    max_tokens: int,
    rng: random.Random,
    weights: dict[str, float] | None = None,
    pool: int = 100_000,
) -> list[list[int]]:
    """Indices of batches whose padded size (rows x (max src + max tgt)) stays within ``max_tokens``.

    Examples are sampled by origin weight w, afresh each epoch: each example is taken int(w) times, plus once more
    with probability w - int(w) (0.3 keeps about 30 %, 2.5 takes every example two or three times). The sample is
    shuffled, sorted by length inside pools, cut into batches, and the batches shuffled.
    """
    weights = weights or {}
    chosen: list[int] = []
    for i, ex in enumerate(examples):
        w = weights.get(ex.origin, 1.0)
        chosen.extend([i] * (int(w) + (rng.random() < w - int(w))))
    rng.shuffle(chosen)
    batches: list[list[int]] = []
    for start in range(0, len(chosen), pool):
        part = sorted(chosen[start : start + pool], key=lambda i: (len(examples[i].src), len(examples[i].tgt)))
        batch: list[int] = []
        longest = 0
        for i in part:
            size = len(examples[i].src) + len(examples[i].tgt) + 1
            if batch and max(longest, size) * (len(batch) + 1) > max_tokens:
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, size)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(examples: list[Example], pad_id: int, start_id: int, eos_id: int) -> dict[str, torch.Tensor]:
    """Padded src (B, S), src_mask, decoder input [start] + tgt and output tgt + [eos] (B, T)."""
    B = len(examples)
    S = max(len(e.src) for e in examples)
    T = max(len(e.tgt) for e in examples) + 1
    src = torch.full((B, S), pad_id, dtype=torch.long)
    tgt_in = torch.full((B, T), pad_id, dtype=torch.long)
    tgt_out = torch.full((B, T), pad_id, dtype=torch.long)
    for b, e in enumerate(examples):
        src[b, : len(e.src)] = torch.from_numpy(e.src.astype(np.int64))
        t = torch.from_numpy(e.tgt.astype(np.int64))
        tgt_in[b, 0], tgt_in[b, 1 : len(t) + 1] = start_id, t
        tgt_out[b, : len(t)], tgt_out[b, len(t)] = t, eos_id
    return {"src": src, "src_mask": src != pad_id, "tgt_in": tgt_in, "tgt_out": tgt_out}
