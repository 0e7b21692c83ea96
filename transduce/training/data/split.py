"""Held-out slices: each non-Bible source gives ~1% dev and ~1% test, chosen by a hash of the pair's group text (the
English side unless the source sets another), capped per source and split."""

from __future__ import annotations

import hashlib

from transduce.training.data.clean import Pair

HELD_OUT_FRACTION = 0.01  # per non-Bible source: ~1% dev and ~1% test, chosen by a hash of the English side
HELD_OUT_CAP = 1000  # at most this many pairs per source and held-out split; the rest of the slice goes to train
SPLITS = ("train", "dev", "test")


def hash_value(en: str) -> float:
    """A stable number in [0, 1) from the English text (same text -> same slice, whatever the source)."""
    return int(hashlib.sha1(en.encode("utf-8")).hexdigest()[:12], 16) / 16**12


def hash_split(en: str) -> str:
    """The uncapped dev/test/train slice of a non-Bible pair."""
    h = hash_value(en)
    return "dev" if h < HELD_OUT_FRACTION else "test" if h < 2 * HELD_OUT_FRACTION else "train"


def group_of(pair: Pair) -> str:
    """The text whose hash places the pair: its ``group`` when set, else its English side."""
    return pair.group if pair.group is not None else pair.en


def assign_splits(pairs: list[Pair], cap: int = HELD_OUT_CAP, *, held_out: bool = True) -> dict[str, list[Pair]]:
    """Split one source: its own split (Bible chapters) when set, else the hash slice, held-out capped at ``cap``.

    Capping keeps the pairs with the lowest hash values (all pairs of one group stay together, up to the cap); pairs
    beyond the cap go to train and are later removed from train if they share a side with a held-out pair. With
    ``held_out=False`` (synthetic sources) every pair goes to train.
    """
    out: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    held: dict[str, list[tuple[float, Pair]]] = {"dev": [], "test": []}
    for p in pairs:
        if p.split is not None:
            out[p.split].append(p)
            continue
        split = hash_split(group_of(p)) if held_out else "train"
        if split == "train":
            out["train"].append(p)
        else:
            held[split].append((hash_value(group_of(p)), p))
    for split, items in held.items():
        items.sort(key=lambda x: (x[0], x[1].en, x[1].de))
        out[split].extend(p for _, p in items[:cap])
        out["train"].extend(p for _, p in items[cap:])
    return out
