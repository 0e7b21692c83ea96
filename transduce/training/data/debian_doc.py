"""Debian documentation translated into German (GPL-2.0-or-later): the .po catalogs of the apt and dpkg manuals, the
Debian installation guide and the Debian Edu manual, from the source packages (``apt-get source --download-only``).

The system's apt configuration is left alone: a private one under ``WORK/apt`` has a deb-src entry for the running
release, its own package lists and cache. When apt cannot fetch the sources the reader skips with the reason.
"""

from __future__ import annotations

import logging
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair
from transduce.training.data.gettext_mo import usable
from transduce.training.data.po import parse_po, strip_markup

log = logging.getLogger("transduce.data")
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class Catalogs:
    """Which German documentation catalogs of one source package to read, and their markup."""

    pattern: str  # regular expression on the path inside the source tarball
    pod: bool = False  # Perl POD man pages (dpkg) rather than DocBook XML


PACKAGES: dict[str, Catalogs] = {
    "apt": Catalogs(r"/doc/po/de\.po$"),
    "dpkg": Catalogs(r"/man/po/de\.po$", pod=True),
    "installation-guide": Catalogs(r"/po/de/[^/]+\.po$"),
    "debian-edu-doc": Catalogs(r"/documentation/[^/]+/[^/]+\.de\.po$"),
}


def codename(os_release: Path = Path("/etc/os-release")) -> str | None:
    """The Debian release's code name (bookworm), or None when this is not Debian."""
    text = os_release.read_text() if os_release.exists() else ""
    ids = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if ids.get("ID", "").strip('"') != "debian":
        return None
    return ids.get("VERSION_CODENAME", "").strip('"') or None


def apt_options(work: Path) -> list[str]:
    """``-o`` options that point apt at the private configuration under work/apt."""
    root = work / "apt"
    return [
        "-o",
        "Dir::Etc::SourceList=/dev/null",
        "-o",
        f"Dir::Etc::SourceParts={root / 'sources.list.d'}",
        "-o",
        f"Dir::State::Lists={root / 'lists'}",
        "-o",
        f"Dir::Cache={root / 'cache'}",
        "-o",
        "Acquire::Languages=none",
    ]


def setup_apt(work: Path, release: str) -> str | None:
    """Write the private deb-src configuration and run ``apt-get update`` on it once; the error line, or None."""
    root = work / "apt"
    if (root / "lists" / ".updated").exists():
        return None
    for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "sources.list.d" / "deb-src.sources").write_text(
        f"Types: deb-src\nURIs: {MIRROR}\nSuites: {release} {release}-updates\nComponents: main\nSigned-By: {KEYRING}\n"
    )
    result = subprocess.run(["apt-get", "-q", *apt_options(work), "update"], capture_output=True, text=True)
    if result.returncode != 0:
        return (result.stderr.strip().splitlines() or ["apt-get update failed"])[-1]
    (root / "lists" / ".updated").touch()
    return None


def download(package: str, work: Path) -> list[Path] | str:
    """The source package's tarballs (downloaded once into work/debsrc/PACKAGE), or the error line."""
    target = work / "debsrc" / package
    if not (target / ".done").exists():
        target.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["apt-get", "-q", *apt_options(work), "source", "--download-only", package],
            cwd=target,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            return (result.stderr.strip().splitlines() or ["apt-get source failed"])[-1]
        (target / ".done").touch()
    return sorted(p for p in target.iterdir() if ".tar." in p.name)


def read_tarball(path: Path, catalogs: Catalogs) -> Iterator[tuple[str, str, str]]:
    """(catalog path, en, de) of every translated, non-fuzzy, usable message of the matching catalogs."""
    pattern = re.compile(catalogs.pattern)
    with tarfile.open(path) as tf:
        for member in tf:
            f = tf.extractfile(member) if member.isfile() and pattern.search(member.name) else None
            if f is None:
                continue
            for entry in parse_po(f.read().decode("utf-8", "replace")):
                if entry.fuzzy or not entry.msgstr:
                    continue
                en, de = strip_markup(entry.msgid, pod=catalogs.pod), strip_markup(entry.msgstr, pod=catalogs.pod)
                if en is not None and de is not None and usable(en, de):
                    yield member.name, en, de


def pairs(
    work: Path,
    meta: dict[str, Any] | None = None,
    *,
    packages: dict[str, Catalogs] = PACKAGES,
    progress: bool = False,
) -> Iterator[Pair]:
    """The documentation catalogs of every package that apt can fetch (the others are listed as skipped)."""
    meta = {} if meta is None else meta
    release = codename()
    if release is None:
        meta["skipped"] = "not a Debian system (no Debian release in /etc/os-release): apt cannot fetch sources"
        return
    error = setup_apt(work, release)
    if error is not None:
        meta["skipped"] = f"apt-get update with a private deb-src entry failed: {error}"
        return
    used: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    catalogs: set[str] = set()
    for package, which in packages.items():
        found = download(package, work)
        if isinstance(found, str):
            log.warning("skipping source package %s: %s", package, found)
            skipped[package] = found
            continue
        used[package] = [p.name for p in found]
        for tarball in found:
            for name, en, de in read_tarball(tarball, which):
                catalogs.add(name)
                yield Pair("debian-doc", en, de)
    meta.update(deb_src=f"{MIRROR} {release} {release}-updates main", packages=used, catalogs=sorted(catalogs))
    if skipped:
        meta["skipped_packages"] = skipped
