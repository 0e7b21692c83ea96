"""Firefox ESR interface strings (MPL-2.0): a language pack (firefox-esr-l10n-de for German, firefox-esr-l10n-fr, ...)
matched by message key to the English strings inside firefox-esr's omni.ja archives (.ftl Fluent files and
.properties files)."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transduce.training.data.clean import Pair
from transduce.training.data.fetch import apt_extract, deb_name
from transduce.training.data.gettext_mo import usable
from transduce.training.data.languages import language
from transduce.training.data.languages import name as language_name

_LANGPACK = "usr/lib/firefox-esr/browser/extensions/langpack-{locale}@firefox-esr.mozilla.org.xpi"
_OMNI = ("usr/lib/firefox-esr/omni.ja", "usr/lib/firefox-esr/browser/omni.ja")
_FTL_ENTRY = re.compile(r"^(-?[A-Za-z][\w-]*)\s*=\s*(.*)$")
_FTL_ATTR = re.compile(r"^\s+\.([A-Za-z][\w-]*)\s*=\s*(.*)$")
_TERM_REF = re.compile(r"\{\s*(-[\w-]+)\s*\}")
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_NOT_TEXT = {"accesskey", "key", "commandkey", "keycode", "style", "width", "height", "size", "modifiers"}
_PROP_LINE = re.compile(r"([^=:\s]+)\s*[=:]\s*(.*)$")
_PROP_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\(.)")

Strings = dict[tuple[str, str], str]  # (canonical file path, message id[.attribute]) -> text


def canonical(path: str, locale: str = "de") -> str:
    """File path with the locale folders (de, en-US) and the browser/ prefix taken out, so both sides agree."""
    parts = [p for p in path.split("/") if p not in (locale, "en-US")]
    return "/".join(parts[1:] if parts and parts[0] == "browser" else parts)


def parse_ftl(text: str) -> dict[str, str]:
    """Message and attribute values of a Fluent file; multi-line values joined with spaces.

    Messages with select expressions (``->``) are left out; a ``{ -term }`` reference is kept as written here and
    resolved later by ``resolve_terms``.
    """
    out: dict[str, str] = {}
    key: str | None = None
    base: str | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        entry = _FTL_ENTRY.match(line)
        attr = _FTL_ATTR.match(line) if line[0].isspace() else None
        if entry:
            key = base = entry.group(1)
            out[key] = entry.group(2).strip()
        elif attr and base is not None:
            key = f"{base}.{attr.group(1)}"
            out[key] = attr.group(2).strip()
        elif line[0].isspace() and key is not None:
            out[key] = f"{out[key]} {line.strip()}".strip()
    return {k: v for k, v in out.items() if v and "->" not in v and not v.startswith(("[", "*["))}


def parse_properties(text: str) -> dict[str, str]:
    """``key = value`` pairs of a Java-style .properties file (comments, continuations and escapes handled)."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        while stripped.endswith("\\") and not stripped.endswith("\\\\"):
            stripped = stripped[:-1] + next(lines, "").strip()
        match = _PROP_LINE.match(stripped)
        if match:
            out[match.group(1)] = _PROP_ESCAPE.sub(
                lambda m: chr(int(m.group(1), 16)) if m.group(1) else {"n": " ", "t": " "}.get(m.group(2), m.group(2)),
                match.group(2),
            )
    return out


def read_archive(zf: zipfile.ZipFile, locale: str = "de") -> Strings:
    """All .ftl and .properties strings of one archive, keyed by canonical path and message id (``locale``: the
    language pack's locale folder name, taken out of the paths)."""
    out: Strings = {}
    for name in sorted(zf.namelist()):
        if name.endswith(".ftl"):
            messages = parse_ftl(zf.read(name).decode("utf-8", "replace"))
        elif name.endswith(".properties") and "/locale/" in name:
            messages = parse_properties(zf.read(name).decode("utf-8", "replace"))
        else:
            continue
        out.update({(canonical(name, locale), k): v for k, v in messages.items()})
    return out


def resolve_terms(strings: Strings) -> Strings:
    """Replace ``{ -brand-short-name }``-style term references by the term's value; drop the terms themselves."""
    terms = {k: v for (_, k), v in strings.items() if k.startswith("-") and "." not in k}
    resolved: Strings = {}
    for key, value in strings.items():
        if key[1].startswith("-"):
            continue
        value = _TERM_REF.sub(lambda m: terms.get(m.group(1), m.group(0)), value)
        resolved[key] = value
    return resolved


def align(en: Strings, de: Strings) -> Iterator[tuple[str, str]]:
    """(en, de) texts of the keys both sides have: no access/command keys, no plural lists (``;``-separated ``#1``
    forms), no placeholder-only strings; HTML tags are removed (their text kept)."""
    for key in sorted(en.keys() & de.keys()):
        if key[1].rsplit(".", 1)[-1].lower() in _NOT_TEXT:
            continue
        en_text, de_text = _TAG.sub("", en[key]), _TAG.sub("", de[key])
        if ("#1" in en_text and ";" in en_text) or not usable(en_text, de_text):
            continue
        yield en_text, de_text


def pairs(
    work: Path, meta: dict[str, Any] | None = None, *, progress: bool = False, lang: str = "de"
) -> Iterator[Pair]:
    """Download both Debian packages (no installation) and align their strings by key."""
    meta = {} if meta is None else meta
    locale = language(lang).firefox
    if locale is None:
        meta["skipped"] = f"Debian has no Firefox ESR language pack for {language_name(lang)}"
        return
    langpack = f"firefox-esr-l10n-{locale.lower()}"
    roots = {p: apt_extract(p, work) for p in ("firefox-esr", langpack)}
    if any(r is None for r in roots.values()):
        meta["skipped"] = f"Debian packages firefox-esr / {langpack} not available"
        return
    english: Strings = {}
    for member in _OMNI:
        path = roots["firefox-esr"] / member  # type: ignore[operator]
        if path.exists():
            with zipfile.ZipFile(path) as zf:
                english.update(read_archive(zf, locale))
    with zipfile.ZipFile(roots[langpack] / _LANGPACK.format(locale=locale)) as zf:  # type: ignore[operator]
        other = read_archive(zf, locale)
    meta["packages"] = [deb_name(r, p) for p, r in roots.items() if r is not None]
    english, other = resolve_terms(english), resolve_terms(other)
    meta["strings"] = {"en": len(english), lang: len(other), "both": len(english.keys() & other.keys())}
    for en_text, other_text in align(english, other):
        yield Pair("firefox", en_text, other_text)
