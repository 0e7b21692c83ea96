"""Decontamination. Evaluation material never enters the corpus: the shared dev sets (``SHARED/dev/NAME.xx-yy.tsv``)
and the reserved test material that can be read (Multi30k test splits, Tatoeba pairs with a short English side,
newstest2014). A pair is dropped from every split when its English or German text matches an English or German text
of any of them; afterwards train pairs that match a text of our own dev/test slices are dropped too. For another
pair (en-fr, ...) the same material is used on the sides it has: its English texts against the English side, and
the dev sets' texts of the pair's other language (if any) against the other side.

Texts match when their ``clean.match_key`` agree (NFKC, case, punctuation and whitespace ignored). The Bible's
holdout chapters are never read, so they need no filter: the Bible reader leaves them out.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transduce.training.data import multi30k, tatoeba
from transduce.training.data.clean import Pair, match_key, split_lines
from transduce.training.data.gitrepo import Repo, missing_reason

DEV_FILE = re.compile(r"^(?P<name>.+)\.(?P<a>[a-z]{2,3})-(?P<b>[a-z]{2,3})\.tsv$")
NEWSTEST2014 = re.compile(r"^testsets/de-en/newstest2014-deen\.(en|de)\.gz$")
LANGS = ("en", "de")


@dataclass
class Reserved:
    """Named sets of match keys per language, and what was read or could not be read for the data card.

    ``lang``: the pair's other language (``Pair.de`` is in it); only English and ``lang`` texts are kept.
    """

    keys: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    read: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    lang: str = "de"

    def add(self, name: str, texts: Mapping[str, Iterable[str]], source: str) -> None:
        """Reserve the texts (per language) under ``name``; ``source`` says where they came from."""
        langs = ("en", self.lang)
        keys = {lang: {k for k in map(match_key, texts.get(lang, ())) if k} for lang in langs}
        self.keys[name] = keys
        self.read[name] = {"from": source, **{f"texts_{lang}": len(keys[lang]) for lang in langs}}

    def hit(self, pair: Pair) -> str | None:
        """The name of the first set that has the pair's English or other-language text, else None."""
        en, other = match_key(pair.en), match_key(pair.de)
        for name, keys in self.keys.items():
            if en in keys["en"] or other in keys[self.lang]:
                return name
        return None


def read_dev_sets(folder: Path) -> dict[str, dict[str, list[str]]]:
    """{name: {lang: texts}} of every headerless ``NAME.xx-yy.tsv`` in the shared dev folder."""
    out: dict[str, dict[str, list[str]]] = {}
    for path in sorted(folder.glob("*.tsv")):
        match = DEV_FILE.match(path.name)
        if match is None:
            continue
        langs = (match.group("a"), match.group("b"))
        texts: dict[str, list[str]] = {lang: [] for lang in langs}
        for line in split_lines(path.read_text(encoding="utf-8")):
            for lang, text in zip(langs, line.split("\t")[:2], strict=False):
                texts[lang].append(text)
        out[match.group("name")] = texts
    return out


def newstest2014(repo: Repo) -> tuple[dict[str, list[str]], list[str]]:
    """({lang: lines}, files) of newstest2014 in an OPUS-MT-train copy."""
    texts: dict[str, list[str]] = {}
    files = []
    for name in repo.files("testsets/de-en/"):
        match = NEWSTEST2014.match(name)
        data = repo.read(name) if match else None
        if match and data is not None:
            texts[match.group(1)] = split_lines(gzip.decompress(data).decode("utf-8", "replace"))
            files.append(name)
    return texts, files


def collect(shared_root: Path, repos: Mapping[str, Repo], lang: str = "de") -> Reserved:
    """Everything that must stay out of the corpus and is readable here; the card lists what was missing."""
    reserved = Reserved(lang=lang)
    dev = shared_root / "dev"
    for name, texts in read_dev_sets(dev).items():
        reserved.add(f"dev:{name}", texts, str(dev / name))
    if "multi30k" in repos:
        captions, files = multi30k.reserved_texts(repos["multi30k"])
        reserved.add("reserved:multi30k-test", captions, f"{len(files)} test files of multi30k")
    else:
        reserved.missing["reserved:multi30k-test"] = missing_reason(["multi30k"])
    if "tatoeba" in repos:
        short = tatoeba.short_pairs(repos["tatoeba"])
        reserved.add(
            "reserved:tatoeba-short",
            {"en": [en for en, _ in short], "de": [de for _, de in short]},
            f"{len(short)} Tatoeba pairs with an English side of 24 characters or fewer",
        )
    else:
        reserved.missing["reserved:tatoeba-short"] = missing_reason(["tatoeba"])
    texts, files = newstest2014(repos["opus-mt-train"]) if "opus-mt-train" in repos else ({}, [])
    if texts:
        reserved.add("reserved:newstest2014", texts, ", ".join(files))
    else:
        reserved.missing["reserved:newstest2014"] = missing_reason(["opus-mt-train"])
    return reserved


def drop_reserved(pairs: Iterable[Pair], reserved: Reserved, removed: Counter[str]) -> Iterator[Pair]:
    """The pairs that match no reserved text; ``removed[name]`` counts the others by the set they matched."""
    for pair in pairs:
        name = reserved.hit(pair)
        if name is None:
            yield pair
        else:
            removed[name] += 1


def drop_overlaps(by_source: dict[str, dict[str, list[Pair]]]) -> dict[str, int]:
    """Remove train pairs whose English or German text matches a text of any source's dev or test slice (on the
    same side); return how many were removed per source."""
    held = {lang: set[str]() for lang in LANGS}
    for splits in by_source.values():
        for p in splits["dev"] + splits["test"]:
            held["en"].add(match_key(p.en))
            held["de"].add(match_key(p.de))
    removed: dict[str, int] = {}
    for name, splits in by_source.items():
        before = len(splits["train"])
        splits["train"] = [
            p for p in splits["train"] if match_key(p.en) not in held["en"] and match_key(p.de) not in held["de"]
        ]
        removed[name] = before - len(splits["train"])
    return removed
