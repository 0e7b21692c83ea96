"""Software translations: German gettext catalogs (.mo) of the system and of Debian l10n/data packages."""

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


def german_catalogs(roots: Iterable[Path]) -> Iterator[Path]:
    """Every */de/LC_MESSAGES/*.mo (and de_DE) under ``roots``, plus WordPress-style ``*de_DE.mo`` files."""
    for root in roots:
        found: set[Path] = set()
        for pattern in ("**/de/LC_MESSAGES/*.mo", "**/de_DE/LC_MESSAGES/*.mo", "**/languages/*de_DE.mo"):
            found.update(root.glob(pattern))
        yield from sorted(found)


def pairs(
    work: Path,
    meta: dict[str, Any] | None = None,
    *,
    packages: Iterable[str] = PACKAGES,
    system_locale: Path = Path("/usr/share/locale"),
    progress: bool = False,
) -> Iterator[Pair]:
    """Pairs from the system's catalogs plus those inside the downloaded packages (missing packages are skipped)."""
    meta = {} if meta is None else meta
    roots = [system_locale] if system_locale.exists() else []
    used, skipped = [], []
    for package in tqdm(list(packages), desc="gettext: packages", unit=" pkg", disable=not progress, file=sys.stderr):
        root = apt_extract(package, work)
        if root is None:
            skipped.append(package)
        else:
            roots.append(root)
            used.append(deb_name(root, package))
    catalogs = list(german_catalogs(roots))
    meta.update(
        packages=used,
        skipped_packages=skipped,
        catalogs=len(catalogs),
        system_locale=str(system_locale) if system_locale.exists() else None,
    )
    for mo in catalogs:
        for msgid, msgstr in read_mo(mo):
            if usable(msgid, msgstr):
                yield Pair("gettext", clean_message(msgid), clean_message(msgstr))
