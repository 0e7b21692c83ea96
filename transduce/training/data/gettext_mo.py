"""Software translations: the gettext catalogs (.mo) of one language (German by default) of the system and of Debian
l10n/data packages. Most packages carry every language; ``libreoffice-l10n-de`` has a package per language."""

from __future__ import annotations

import gettext
import logging
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transduce.training.data.clean import Pair
from transduce.training.data.fetch import apt_extract, deb_name
from transduce.training.data.languages import language

log = logging.getLogger("transduce.data")

PACKAGES = (
    "libreoffice-l10n-de",
    "wesnoth-1.16-data",
    "wesnoth-1.16-httt",
    "wesnoth-1.16-trow",
    "wesnoth-1.16-tsg",
    "wesnoth-1.16-sof",
    "wesnoth-1.16-l",
    "wesnoth-1.16-did",
    "wesnoth-1.16-ei",
    "wesnoth-1.16-nr",
    "wesnoth-1.16-sotbe",
    "wesnoth-1.16-thot",
    "wesnoth-1.16-utbs",
    "wesnoth-1.16-dm",
    "wesnoth-1.16-dw",
    "wesnoth-1.16-low",
    "wesnoth-1.16-sota",
    "wesnoth-1.16-ttb",
    "gcc-12-locales",
    "inkscape",
    "freeciv-data",
    "gimp-data",
    "digikam-data",
    "vlc-l10n",
    "evolution-common",
    "gnucash-common",
    "wordpress-l10n",
    "cinnamon-l10n",
    "krita-l10n",
    "kdevelop-l10n",
)
_ACCEL = re.compile(r"(?<![\w&_~])[_&~](?=\w)")
_PLACEHOLDER = re.compile(r"%[-+ #0-9.]*[a-zA-Z]|%\([^)]*\)[a-z]|\{[^}]*\}|\$\w+|<[^>]+>|&\w+;")
_CREDITS = re.compile(r"translator|credits|übersetz", re.IGNORECASE)


def clean_message(text: str) -> str:
    """Drop accelerator markers (_File, &Open, ~Save) and turn line breaks into spaces."""
    return _ACCEL.sub("", text.replace("\\n", " ").replace("\n", " "))


def usable(msgid: str, msgstr: str) -> bool:
    """False for empty, placeholder/markup-only, credit and identical messages."""
    if not msgid or not msgstr or msgid == msgstr or _CREDITS.search(msgid):
        return False
    return bool(re.search(r"[^\W\d_]{2,}", _PLACEHOLDER.sub("", msgid)))


def read_mo(path: Path) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of one catalog; contexts and plural forms use the first (singular) form."""
    try:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - a broken catalog is skipped, not fatal
        log.warning("skipping %s: %s", path, exc)
        return
    for key, msgstr in catalog.items():
        msgid = key[0] if isinstance(key, tuple) else key
        if isinstance(key, tuple) and key[1] != 0:
            continue
        context, _, msgid = msgid.rpartition("\x04")
        if context and _CREDITS.search(context):
            continue  # KDE's "NAME OF TRANSLATORS" / "EMAIL OF TRANSLATORS"
        if msgid and isinstance(msgstr, str):
            yield msgid, msgstr


def catalogs(roots: Iterable[Path], lang: str = "de") -> Iterator[Path]:
    """Every ``*/LOCALE/LC_MESSAGES/*.mo`` of the language's gettext locales (de, de_DE) under ``roots``, plus
    WordPress-style ``languages/*LOCALE.mo`` files (``admin-fr_FR.mo``; a locale without a region, such as ``ar``,
    matches ``ar.mo`` and ``*-ar.mo`` only)."""
    spec = language(lang)
    for root in roots:
        found: set[Path] = set()
        for locale in spec.gettext:
            found.update(root.glob(f"**/{locale}/LC_MESSAGES/*.mo"))
        for locale in spec.wordpress:
            if "_" in locale:
                found.update(root.glob(f"**/languages/*{locale}.mo"))
            else:
                found.update(
                    p for p in root.glob("**/languages/*.mo") if p.stem == locale or p.stem.endswith(f"-{locale}")
                )
        yield from sorted(found)


def packages_for(lang: str) -> tuple[str, ...]:
    """PACKAGES for ``lang``: ``libreoffice-l10n-de`` becomes that language's l10n package (left out when Debian has
    none); the other packages carry every language."""
    suffix = language(lang).libreoffice
    out = []
    for package in PACKAGES:
        if package == "libreoffice-l10n-de":
            if suffix is not None:
                out.append(f"libreoffice-l10n-{suffix}")
        else:
            out.append(package)
    return tuple(out)


def pairs(
    work: Path,
    meta: dict[str, Any] | None = None,
    *,
    packages: Iterable[str] | None = None,
    system_locale: Path = Path("/usr/share/locale"),
    progress: bool = False,
    lang: str = "de",
) -> Iterator[Pair]:
    """Pairs from the system's catalogs plus those inside the downloaded packages (missing packages are skipped);
    ``packages`` defaults to ``packages_for(lang)``."""
    meta = {} if meta is None else meta
    roots = [system_locale] if system_locale.exists() else []
    used, skipped = [], []
    chosen = list(packages) if packages is not None else list(packages_for(lang))
    for package in tqdm(chosen, desc="gettext: packages", unit=" pkg", disable=not progress, file=sys.stderr):
        root = apt_extract(package, work)
        if root is None:
            skipped.append(package)
        else:
            roots.append(root)
            used.append(deb_name(root, package))
    found = list(catalogs(roots, lang))
    meta.update(
        packages=used,
        skipped_packages=skipped,
        catalogs=len(found),
        system_locale=str(system_locale) if system_locale.exists() else None,
    )
    for mo in found:
        for msgid, msgstr in read_mo(mo):
            if usable(msgid, msgstr):
                yield Pair("gettext", clean_message(msgid), clean_message(msgstr))
