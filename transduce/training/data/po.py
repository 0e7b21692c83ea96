"""Gettext .po files: a small parser (msgctxt/msgid/msgstr, plurals, fuzzy and obsolete entries) and the markup
strippers for documentation catalogs (DocBook/XML tags and entities, Perl POD formatting codes)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_ESCAPE = re.compile(r"\\(.)")
_KEYWORD = re.compile(r"^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(\".*\")\s*$")


@dataclass
class Entry:
    """One catalog entry; ``msgstr`` is the singular (first) translation."""

    msgid: str = ""
    msgstr: str = ""
    msgctxt: str | None = None
    flags: set[str] = field(default_factory=set)
    plural: bool = False

    @property
    def fuzzy(self) -> bool:
        return "fuzzy" in self.flags


def _unquote(text: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text.strip()[1:-1])


def parse_po(text: str) -> Iterator[Entry]:
    """Entries of a .po file in order (obsolete ``#~`` entries and the header entry are left out)."""
    entry = Entry()
    has_msgstr = False
    target: str | None = None  # the field that continuation lines ("...") append to
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line.startswith("#~"):
            continue
        match = _KEYWORD.match(line)
        starts_entry = line.startswith("#") or (match is not None and match.group(1) in ("msgctxt", "msgid"))
        if starts_entry and has_msgstr:
            if entry.msgid:
                yield entry
            entry, has_msgstr, target = Entry(), False, None
        if line.startswith("#,"):
            entry.flags.update(f.strip() for f in line[2:].split(","))
        elif match is not None:
            keyword, index, value = match.groups()
            if keyword == "msgid_plural":
                entry.plural, target = True, None
            elif keyword.startswith("msgstr"):
                has_msgstr = True
                target = "msgstr" if index in (None, "0") else None  # later plural forms are not used
            else:
                target = keyword
            if target is not None:
                setattr(entry, target, _unquote(value))
        elif line.startswith('"') and target is not None:
            setattr(entry, target, (getattr(entry, target) or "") + _unquote(line))
    if has_msgstr and entry.msgid:
        yield entry


_XML_ENTITY = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'", "nbsp": " "}
_ENTITY = re.compile(r"&(#x[0-9a-fA-F]+|#\d+|[A-Za-z][\w.-]*);")
_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
# code, DTD declarations/comments, and empty link elements whose text comes from elsewhere
_SKIP = re.compile(r"<(screen|programlisting|literallayout|synopsis|cmdsynopsis)\b|<!|<(ulink|xref|link)\b[^<>]*/>")
_POD_LONG = re.compile(r"[BICFLSX]<{2,}\s+(.*?)\s+>{2,}")
_POD = re.compile(r"[BICFLSX]<([^<>]*)>")
_POD_ESCAPE = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}


def _entity(match: re.Match[str]) -> str:
    name = match.group(1)
    if name.startswith("#x"):
        return chr(int(name[2:], 16))
    if name.startswith("#"):
        return chr(int(name[1:]))
    return _XML_ENTITY.get(name, match.group(0))


def strip_pod(text: str) -> str:
    """Perl POD formatting codes removed, their text kept: ``B<dpkg> E<lt>file>`` -> ``dpkg <file>``."""
    text = re.sub(r"E<(\w+)>", lambda m: f"\0{m.group(1)}\0", text)
    for _ in range(4):  # nested codes: B<I<x>>
        text = _POD_LONG.sub(r"\1", text)
        text = _POD.sub(lambda m: m.group(1).split("|")[0], text)
    return re.sub(r"\0(\w+)\0", lambda m: _POD_ESCAPE.get(m.group(1), ""), text)


def strip_markup(text: str, *, pod: bool = False) -> str | None:
    """Plain text of a documentation message (XML tags and entities removed; POD codes too when ``pod``); None when
    it is code (screen/program listings), a DTD fragment, has an empty link element (its text comes from
    elsewhere) or uses entities defined elsewhere (``&debian;``), whose expansion is unknown here."""
    if _SKIP.search(text):
        return None
    if pod:  # POD man pages have no XML markup; the <...> that E<lt>/E<gt> give back are text
        return " ".join(strip_pod(text).split())
    text = _TAG.sub("", text)
    text = _ENTITY.sub(_entity, text)
    if _ENTITY.search(text):
        return None
    return " ".join(text.split())
