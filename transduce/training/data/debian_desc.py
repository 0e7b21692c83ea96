"""Debian package descriptions: the archive's Translation-en and Translation-de (or -fr, ...) indexes of the DDTP,
matched by (package, Description-md5); short descriptions and long-description paragraphs when their counts agree.

German reads apt's own lists (``apt-get update -o Acquire::Languages=en,de`` when they lack it); any other language is
fetched with a private apt configuration under ``WORK/debian-XX/apt`` (the system's lists are left alone)."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair
from transduce.training.data.debian_doc import KEYRING, MIRROR, codename
from transduce.training.data.languages import language
from transduce.training.data.languages import name as language_name

log = logging.getLogger("transduce.data")
LISTS = Path("/var/lib/apt/lists")
SECURITY = "http://deb.debian.org/debian-security"
COMPRESSED = (".gz", ".xz", ".bz2", ".lz4", ".zst", ".lzma")


def parse_index(text: str, lang: str) -> dict[tuple[str, str], list[str]]:
    """(package, md5) -> [short description, paragraph, paragraph, ...] of one Translation-xx index."""
    out: dict[tuple[str, str], list[str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith(" ") and key:
                fields[key] += "\n" + line[1:]
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        body = fields.get(f"Description-{lang}")
        if body is None or "Package" not in fields:
            continue
        short, _, long = body.partition("\n")
        paragraphs = [" ".join(p.split()) for p in long.split("\n.\n") if p.strip() and p.strip() != "."]
        out[(fields["Package"], fields.get("Description-md5", ""))] = [short, *paragraphs]
    return out


def align(en: dict[tuple[str, str], list[str]], de: dict[tuple[str, str], list[str]]) -> Iterator[tuple[str, str]]:
    """(en, de) text pairs of entries present in both indexes."""
    for key, de_parts in sorted(de.items()):
        en_parts = en.get(key)
        if not en_parts:
            continue
        yield en_parts[0], de_parts[0]
        if len(en_parts) == len(de_parts):
            yield from zip(en_parts[1:], de_parts[1:], strict=True)


def _read(path: Path) -> str:
    """A (possibly compressed) apt list file as text, via apt's own helper (an uncompressed one is read directly)."""
    if not path.name.endswith(COMPRESSED):
        return path.read_text(encoding="utf-8")
    return subprocess.run(
        ["/usr/lib/apt/apt-helper", "cat-file", str(path)], capture_output=True, text=True, check=True
    ).stdout


def _indexes(lists: Path, lang: str) -> list[Path]:
    """The main Translation-LANG list files (compressed or not; not Translation-pt_BR for pt, no .diff folders)."""
    return sorted(
        p
        for p in lists.glob(f"*_main_i18n_Translation-{lang}*")
        if not p.name.endswith(".diff") and p.name.split("_Translation-", 1)[1].split(".")[0] == lang
    )


def private_lists(root: Path, lang: str) -> Path | None:
    """``apt-get update`` of the running Debian release's main Translation-en/-LANG indexes (no Packages files) with a
    private configuration under ``root``; its lists folder, or None (with a warning) when that cannot be done."""
    release = codename()
    if release is None:
        log.warning("not a Debian system: cannot fetch Translation-%s", lang)
        return None
    lists = root / "lists"
    if (lists / ".updated").exists():
        return lists
    for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "sources.list.d" / "i18n.sources").write_text(
        f"Types: deb\nURIs: {MIRROR}\nSuites: {release} {release}-updates\nComponents: main\nSigned-By: {KEYRING}\n\n"
        f"Types: deb\nURIs: {SECURITY}\nSuites: {release}-security\nComponents: main\nSigned-By: {KEYRING}\n"
    )
    options = {
        "Dir::Etc::SourceList": "/dev/null",
        "Dir::Etc::SourceParts": str(root / "sources.list.d"),
        "Dir::State::Lists": str(lists),
        "Dir::Cache": str(root / "cache"),
        "Acquire::Languages": f"en,{lang}",
        "Acquire::IndexTargets::deb::Packages::DefaultEnabled": "false",
    }
    command = ["apt-get", "-q", *(x for k, v in options.items() for x in ("-o", f"{k}={v}")), "update"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        log.warning("apt-get update for Translation-%s failed: %s", lang, result.stderr.strip()[-200:])
        return None
    (lists / ".updated").touch()
    return lists


def snapshot(work: Path, lists: Path = LISTS, lang: str = "de") -> dict[str, Path]:
    """Copy apt's Translation-en/-de indexes (decompressed) into work/debian once; later builds reuse that copy.

    When apt has no German index yet, run ``apt-get update -o Acquire::Languages=en,de`` first. Another language
    (``lang``) is copied into work/debian-LANG from ``lists`` when they have it, else fetched by ``private_lists``.
    Returns {"en": path, DDTP code: path}, or {} when an index is missing.
    """
    target = work / ("debian" if lang == "de" else f"debian-{lang}")  # en-de keeps the folder it always had
    ddtp = language(lang).ddtp  # zh_CN for zh
    cached = {code: target / f"Translation-{code}" for code in ("en", ddtp)}
    if all(p.exists() for p in cached.values()):
        return cached
    have = lists != LISTS or bool(_indexes(lists, "en") and _indexes(lists, ddtp))
    if not have and ddtp == "de":
        result = subprocess.run(
            ["apt-get", "update", "-qq", "-o", "Acquire::Languages=en,de"], capture_output=True, text=True
        )
        if result.returncode != 0:
            log.warning("apt-get update failed (%s); using the lists already present", result.stderr.strip()[-200:])
    elif not have:
        lists = private_lists(target / "apt", ddtp) or lists
    found = {code: _indexes(lists, code) for code in ("en", ddtp)}
    if not all(found.values()):
        return {}
    target.mkdir(parents=True, exist_ok=True)
    for code, files in found.items():
        tmp = cached[code].with_suffix(".tmp")
        tmp.write_text("\n\n".join(_read(f).strip("\n") for f in files) + "\n", encoding="utf-8")
        tmp.replace(cached[code])
    (target / "SOURCES").write_text("".join(f"{f.name}\n" for files in found.values() for f in files))
    return cached


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, lists: Path = LISTS, progress: bool = False, lang: str = "de"
) -> Iterator[Pair]:
    """Align the archive's English and ``lang`` package descriptions (snapshotted in the work folder)."""
    meta = {} if meta is None else meta
    files = snapshot(work, lists, lang)
    ddtp = language(lang).ddtp
    if not files:
        log.warning("no Translation-en/-%s indexes under %s; skipping Debian descriptions", lang, lists)
        meta["skipped"] = (
            f"no Translation-en/-{lang} indexes"
            if lang == "de"
            else f"no Translation-en/-{lang} indexes (the DDTP has no {language_name(lang)} descriptions here)"
        )
        return
    sources = files["en"].parent / "SOURCES"
    meta["indexes"] = sources.read_text().split() if sources.exists() else [str(f) for f in files.values()]
    en = parse_index(files["en"].read_text(encoding="utf-8"), "en")
    other = parse_index(files[ddtp].read_text(encoding="utf-8"), ddtp)
    meta["descriptions"] = {"en": len(en), lang: len(other), "both": len(en.keys() & other.keys())}
    for en_text, other_text in align(en, other):
        yield Pair("debian", en_text, other_text)
