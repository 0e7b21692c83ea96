"""Vocabulary shortlist (Marian's lexical shortlist, CTranslate2's vmap): per batch, the decoder scores only the
target pieces that can plausibly appear in its translations, instead of the whole vocabulary.

The candidates of a sentence are the union of
- the ``frequent`` most frequent pieces of the target language (function words, punctuation),
- for every piece of its source, its ``per_piece`` best translation candidates from a co-occurrence table
  built on the training corpus (``transduce shortlist``),
- its own source pieces (names, numbers and placeholders are copied through),
- the control ids (eos, unk).

The output projection rows of a batch's candidates (the union of its sentences') are gathered once per batch into a
(C, d_model) matrix that the shortlist decoder graph takes as an input (an int8 export's: (d_model, C) int8 and C
scales), so every step multiplies by C rows instead of V. A (R, C) mask keeps, for every row, the candidates of its
own sentence only, and log-probs are normalised over those: a sentence decodes the same alone or batched with any
others, and whenever a step's best full-vocabulary token is among its candidates, greedy search picks the same token.
"""

from __future__ import annotations

import functools
import platform
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from transduce.engine import io_names as names
from transduce.engine.cpu import cpu_flags
from transduce.engine.io_names import SHORTLIST_FILE
from transduce.paths import replacing_file

NO_TAG = -1  # table key of a model without target-language tags (one direction)


def sibling_table(checkpoint: str | Path) -> Path | None:
    """The shortlist table beside a checkpoint (``shortlist.npz``, where `transduce shortlist` writes it), if any;
    `transduce export` and the shipped model's first-use export take it from there."""
    path = Path(checkpoint).parent / SHORTLIST_FILE
    return path if path.is_file() else None


@dataclass(frozen=True)
class ShortlistTable:
    """Co-occurrence candidates per target direction, keyed by the id of the target-language tag (``NO_TAG`` for an
    untagged model): ``frequent[key]`` the most frequent target pieces, best first; ``offsets[key]`` (V + 1,) and
    ``targets[key]`` the CSR lists of candidates per source piece id, best first."""

    vocab_size: int
    frequent: dict[int, np.ndarray]
    offsets: dict[int, np.ndarray]
    targets: dict[int, np.ndarray]

    def __post_init__(self) -> None:
        keys = set(self.frequent)
        if not keys or keys != set(self.offsets) or keys != set(self.targets):
            raise ValueError("a shortlist table needs frequent, offsets and targets for the same, non-empty keys")
        for key in keys:
            off, tgt = self.offsets[key], self.targets[key]
            if off.shape != (self.vocab_size + 1,) or off[0] != 0 or off[-1] != len(tgt) or np.any(np.diff(off) < 0):
                raise ValueError(f"shortlist offsets of key {key} are not a CSR index over {self.vocab_size} pieces")
            for arr in (tgt, self.frequent[key]):
                if len(arr) and (arr.min() < 0 or arr.max() >= self.vocab_size):
                    raise ValueError(f"shortlist of key {key} names ids outside the vocabulary ({self.vocab_size})")

    def save(self, path: str | Path, projection: np.ndarray | None = None) -> None:
        """Write the table (and, in a model directory, the output projection rows (V, d_model)) as one .npz."""
        arrays: dict[str, np.ndarray] = {"vocab_size": np.array(self.vocab_size)}
        for key in self.frequent:
            arrays[f"frequent.{key}"] = self.frequent[key].astype(np.int32)
            arrays[f"offsets.{key}"] = self.offsets[key].astype(np.int64)
            arrays[f"targets.{key}"] = self.targets[key].astype(np.int32)
        if projection is not None:
            arrays["projection"] = np.ascontiguousarray(projection, dtype=np.float32)
        with replacing_file(path) as tmp, open(tmp, "wb") as f:  # a failed write leaves an earlier table as it was
            np.savez_compressed(f, **arrays)  # type: ignore[arg-type]  # numpy stubs type the allow_pickle keyword


def load_table(path: str | Path, *, projection: bool = True) -> tuple[ShortlistTable, np.ndarray | None]:
    """A table written by ``ShortlistTable.save`` and its projection rows (None when it has none, or not read:
    ``projection=False``)."""
    try:
        with np.load(path) as data:
            arrays = {name: data[name] for name in data.files if projection or name != "projection"}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a shortlist file, or is damaged: {exc}") from exc
    if "vocab_size" not in arrays or arrays["vocab_size"].shape != ():
        raise ValueError(f"{path} is not a shortlist file: it has no vocab_size (one number)")
    parts: dict[str, dict[int, np.ndarray]] = {"frequent": {}, "offsets": {}, "targets": {}}
    for name, value in arrays.items():
        kind, _, key = name.partition(".")
        if kind in parts and key.lstrip("-").isdigit():
            parts[kind][int(key)] = value
    table = ShortlistTable(int(arrays["vocab_size"]), parts["frequent"], parts["offsets"], parts["targets"])
    return table, arrays.get("projection")


@dataclass(frozen=True)
class ShortlistConfig:
    """How many candidates a batch takes from the table."""

    frequent: int = 256  # most frequent target pieces, always candidates
    per_piece: int = 16  # best co-occurrence candidates per source piece

    def __post_init__(self) -> None:
        if self.frequent < 0 or self.per_piece < 0:
            raise ValueError(f"shortlist sizes must be >= 0, got frequent={self.frequent}, per_piece={self.per_piece}")


@dataclass(frozen=True)
class ProjectionRows:
    """The shortlist decoder's projection inputs for ``count`` candidates (float32 rows, or int8 ones with scales)."""

    feeds: dict[str, np.ndarray]
    count: int


@functools.cache
def row_peak() -> int:
    """The largest int8 value of a quantised row on this CPU: 127, or 63 (7 bits) on an x86 CPU without VNNI, whose
    u8 x s8 kernels (VPMADDUBSW) add pairs of products into 16 bits and saturate on full-range weights (measured on
    an AMD EPYC VM without them: a projection off by 7 % of its range, 0.9 % with 7 bits; onnxruntime's
    ``reduce_range``). Read from /proc/cpuinfo; elsewhere x86 is taken to lack VNNI."""
    return peak_for(platform.machine(), cpu_flags())


def peak_for(machine: str, flags: Iterable[str]) -> int:
    """``row_peak`` for a CPU of architecture ``machine`` (``platform.machine()``) with these /proc/cpuinfo flags."""
    if machine.lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return 127  # (ARM's int8 dot products do not saturate)
    return 127 if {"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags) else 63


def quantize_rows(projection: np.ndarray, peak_q: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 rows, one scale per row: (V, d) int8 and (V,) float32, row v ~= int8[v] * scale[v], in
    [-peak_q, peak_q] (``row_peak``: this CPU's)."""
    top = float(peak_q or row_peak())
    q = np.empty(projection.shape, np.int8)
    scales = np.empty(len(projection), np.float32)
    for start in range(0, len(projection), 1024):  # blocks: no float temporaries the size of the whole table
        block = slice(start, start + 1024)
        peak = np.abs(projection[block]).max(axis=1)
        scales[block] = np.where(peak > 0, peak / top, 1.0)
        q[block] = np.clip(np.rint(projection[block] / scales[block, None]), -top, top)
    return q, scales


class Shortlist:
    """A table and the output projection rows of one model: candidates and their projection per batch."""

    def __init__(
        self,
        table: ShortlistTable,
        projection: np.ndarray,
        *,
        always: Sequence[int],
        unk: int | None = None,
        config: ShortlistConfig | None = None,
        quantized: bool = False,
    ) -> None:
        """``always``: ids every sentence may produce (eos). ``unk``: the unknown piece, a candidate only of a sentence
        whose source has one (a beam search over a short candidate list otherwise ends common single words as the
        unknown piece, rendered " ⁇ ", e.g. "Click" or "Settings"). ``quantized``: rows for an int8 export's shortlist
        decoder (``quantize_rows``; its projection is then an int8 MatMul)."""
        if projection.ndim != 2 or projection.shape[0] != table.vocab_size:
            raise ValueError(
                f"the projection must have one row per vocabulary piece ({table.vocab_size}), got {projection.shape}"
            )
        self.table, self.config = table, config or ShortlistConfig()
        rows = np.ascontiguousarray(projection, dtype=np.float32)
        self.d_model = rows.shape[1]
        # (V, d_model) float32 rows, or for an int8 shortlist decoder only their int8 rows and (V,) scales (a quarter
        # of the memory), held as the whole vocabulary's decoder inputs (the int8 rows in the decoder's (d_model, V)
        # layout, so a batch's columns are one take)
        self.projection: np.ndarray | None = None if quantized else rows
        if quantized:
            q, scales = quantize_rows(rows)
            feeds = {
                names.DEC_VOCAB_PROJECTION_INT8: np.ascontiguousarray(q.T),
                names.DEC_VOCAB_PROJECTION_SCALE: scales,
            }
        else:
            feeds = {names.DEC_VOCAB_PROJECTION: rows}
        self._every = ProjectionRows(feeds, table.vocab_size)
        self.always = np.asarray(sorted(set(always)), dtype=np.int64)
        self.unk = None if unk is None or unk in set(always) else int(unk)
        self._frequent = {k: v[: self.config.frequent].astype(np.int64) for k, v in table.frequent.items()}

    @property
    def vocab_size(self) -> int:
        """V, the full vocabulary."""
        return self.table.vocab_size

    def candidates(self, sources: Sequence[Sequence[int]]) -> np.ndarray:
        """Sorted target ids a batch of source id sequences may produce: the union of each sentence's own."""
        return np.unique(np.concatenate([self.always, *(self.sentence_candidates(seq) for seq in sources)]))

    def sentence_candidates(self, seq: Sequence[int]) -> np.ndarray:
        """Sorted target ids one source id sequence may produce (its tag, when the model has tags, picks the
        direction's table; an unknown first id uses every table of the model)."""
        t, K = self.table, self.config.per_piece
        ids = np.unique(np.asarray(seq, dtype=np.int64))
        ids = ids[(ids >= 0) & (ids < t.vocab_size)]
        parts = [self.always, ids]
        keys = [int(seq[0])] if len(seq) and int(seq[0]) in t.offsets else list(t.offsets)
        for key in keys:
            if K:  # each source piece's first K targets: the spans offsets[id] .. min(offsets[id] + K, offsets[id + 1])
                start = t.offsets[key][ids].astype(np.int64, copy=False)
                lengths = np.minimum(K, t.offsets[key][ids + 1] - start)  # (n,)
                at = np.arange(int(lengths.sum())) + np.repeat(start - (np.cumsum(lengths) - lengths), lengths)
                parts.append(t.targets[key][at].astype(np.int64))
            parts.append(self._frequent[key])
        own = np.unique(np.concatenate(parts))
        if self.unk is not None and self.unk not in ids:  # the table or frequent pieces may hold it
            own = own[own != self.unk]
        return own

    def masks(self, sources: Sequence[Sequence[int]], candidates: np.ndarray) -> np.ndarray:
        """(N, C) bool: which of ``candidates`` (sorted; a superset of every sentence's own) each source's own
        candidates are. The decoder normalises each row over its own, so a sentence translates the same whatever it
        is batched with."""
        return _masks([self.sentence_candidates(seq) for seq in sources], candidates)

    def batch(self, sources: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """``candidates(sources)`` and ``masks`` over them, each sentence's candidates looked up once."""
        own = [self.sentence_candidates(seq) for seq in sources]
        candidates = np.unique(np.concatenate([self.always, *own]))
        return candidates, _masks(own, candidates)

    @property
    def quantized(self) -> bool:
        """Whether the rows are an int8 shortlist decoder's (``quantize_rows``)."""
        return self.projection is None

    def rows(self, candidates: np.ndarray) -> ProjectionRows:
        """The projection rows of ``candidates`` as the shortlist decoder's inputs: (C, d_model) float32, or for an
        int8 decoder (d_model, C) int8 and (C,) scales; contiguous."""
        if self.projection is not None:
            rows = np.take(self.projection, candidates, axis=0)
            return ProjectionRows({names.DEC_VOCAB_PROJECTION: rows}, len(candidates))
        every = self._every.feeds
        feeds = {
            names.DEC_VOCAB_PROJECTION_INT8: np.take(every[names.DEC_VOCAB_PROJECTION_INT8], candidates, axis=1),
            names.DEC_VOCAB_PROJECTION_SCALE: every[names.DEC_VOCAB_PROJECTION_SCALE][candidates],
        }
        return ProjectionRows(feeds, len(candidates))

    def every_row(self) -> ProjectionRows:
        """The whole vocabulary's rows (a state with no candidates of its own): the tables themselves, not copies."""
        return self._every


def _masks(own: list[np.ndarray], candidates: np.ndarray) -> np.ndarray:
    """(N, C) bool: row i marks where ``own[i]`` (sorted ids) lies in ``candidates`` (sorted, holding them all)."""
    out = np.zeros((len(own), len(candidates)), dtype=bool)
    for i, ids in enumerate(own):
        at = np.searchsorted(candidates, ids)
        if np.any(at >= len(candidates)) or np.any(candidates[np.minimum(at, len(candidates) - 1)] != ids):
            raise ValueError("the candidates given do not hold every candidate of each source")
        out[i, at] = True
    return out
