"""Glossaries: terms that come out of a translation as given (``{"source": "Node.js", "target": null}`` keeps a name,
``{"source": "pull request", "target": "Pull-Request"}`` imposes a translation).

Placeholder masking, with the placeholders ``format: "html"`` already uses for inline markup
(``transduce.service.htmlunits``): each occurrence of a term (case-insensitive, whole words, the longest term first,
never overlapping) is cut out of the text before it is split into sentences and sent as ``[n]``; the target term is
put back where the placeholder comes back, or where it maps when the model loses it. So the model never sees the term
(it cannot translate or split it), the target appears exactly once per occurrence, and the cache (which stores the
model's output for what it was sent) serves every glossary correctly. A text without a term is sent exactly as it
would be without a glossary.

Terms come from the request's ``glossary`` and from the server's glossary file (``glossary_file``): JSON mapping a
language pair to its entries, ``{"en-de": [{"source": "...", "target": "..."}]}``, read once when the settings are
made; a request entry overrides a file entry for the same source term.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from transduce.engine.text import Segmented, segment
from transduce.service.field_errors import HALF_CHARACTERS, describe, half_characters
from transduce.service.htmlnodes import Term
from transduce.service.htmlunits import Unit
from transduce.service.schemas import MAX_TERM_CHARS, GlossaryEntry

Pair = tuple[str, str]  # (source language, target language)
ServerGlossary = Mapping[Pair, tuple[GlossaryEntry, ...]]
Terms = tuple[tuple[str, str | None], ...]  # (source, target) of every term that applies, hashable for the cache
SHAPE = '[{"source": "term", "target": "term or null"}, ...]'
_ENTRIES = TypeAdapter(list[GlossaryEntry])


class GlossaryFileError(ValueError):
    """The glossary file cannot be used; the message (one line) says where and what to fix."""


def _case_classes() -> dict[int, int]:
    """Characters ``re.IGNORECASE`` holds equal beyond lower-casing (``i`` and dotless ``ı``, ``s`` and long ``ſ``,
    ``µ`` and ``μ``, ...): each mapped to the smallest of its class (from ``re``'s own table; none where it lacks
    one)."""
    try:
        extra: dict[int, tuple[int, ...]] = importlib.import_module("re._casefix")._EXTRA_CASES
    except (ImportError, AttributeError):
        return {}
    return {code: min(code, *others) for code, others in extra.items()}


_SAME_CASE = _case_classes()
_DOTTED_I = "\u0130"  # "İ", which re matches to "i" though it lower-cases to two characters ("i" and a dot)


def _unit(c: str) -> str:
    """A term's character as the trie keys it: lower-cased, and one of each ``_case_classes`` class (terms that
    differed in "i" and "ı" alone were branches ``re`` had to try each, 100 at every word of a 5,000-character q)."""
    lower = "i" if c == _DOTTED_I else c.lower()
    return lower.translate(_SAME_CASE) if len(lower) == 1 else c


def fold(term: str) -> str:
    """A source term as matching compares it: case-folded (``re``'s case classes as one), runs of whitespace as one
    space."""
    return " ".join(term.split()).replace(_DOTTED_I, "i").casefold().translate(_SAME_CASE)


def duplicate(entries: Sequence[GlossaryEntry]) -> tuple[str, str] | None:
    """The first two entries whose source terms match the same text, or None."""
    seen: dict[str, str] = {}
    for entry in entries:
        key = fold(entry.source)
        if key in seen:
            return seen[key], entry.source
        seen[key] = entry.source
    return None


def twice_text(twice: tuple[str, str]) -> str:
    """How a duplicate source term is told."""
    if twice[0] == twice[1]:
        return f"the source term {twice[0]!r} twice"
    return f"the source terms {twice[0]!r} and {twice[1]!r}, which match the same text (case and spacing are ignored)"


def glossaries(file_entries: Sequence[GlossaryEntry], request_entries: Sequence[GlossaryEntry]) -> tuple[Terms, Terms]:
    """The request's terms and the file's for the pair, each compiled and cached on its own (``splitter``): a request
    entry replaces a file entry for the same term (``split_by``). Merged into one, every request glossary compiled
    the whole file again, and the cache held a copy of it for each (a 2,000-term file: 2.2 MB per distinct request
    glossary)."""
    return tuple((e.source, e.target) for e in request_entries), tuple((e.source, e.target) for e in file_entries)


class Matcher:
    """Finds a glossary's terms in a text: ``split`` cuts it into text and ``Term``s."""

    def __init__(self, terms: Terms, *, html: bool, glued: bool = False) -> None:
        self.glued = glued  # its terms are runs kept as written: Term.glued
        space = r"\s+" if html else r"[^\S\n]+"  # a term may wrap across lines in HTML, never in plain text
        longest = sorted(terms, key=lambda t: -len(t[0]))
        alternatives = [space.join(re.escape(word) for word in source.split()) for source, _ in longest]
        # one trie-shaped pattern, not an alternation: terms sharing a prefix are tried together, so matching is
        # linear in the text times the longest term however many terms share it; greedy optional groups prefer
        # the longest term and back off to a shorter one that ends on a word boundary
        pattern = _trie_pattern([source for source, _ in longest], space)
        # a term is a whole word ("cat" is not in "concat", "U.S." not in "U.S.A.", ".NET" not in "ASP.NET"); only an
        # edge that is a symbol outside ASCII (an emoji) or a control character (NUL, which the model cannot spell)
        # may touch a word ("Hi👋", "Hi\x00")
        symbol = r"[^\w\x20-\x7e]"
        start, end = rf"(?:(?={symbol})|(?<!\w))", rf"(?:(?<={symbol})|(?!\w))"
        self._pattern = re.compile(rf"{start}(?:{pattern}){end}", re.IGNORECASE)
        self._targets = {fold(source): target for source, target in longest}
        # each term's own pattern, compiled (once, here, not in re's shared cache of 512) only when a match folds to
        # no term (where case-folding and re's case rules differ, "ß" and "ss"): compiling 100 long terms' for every
        # glossary took as long as the trie's
        self._each = [(rf"{p}\Z", target) for p, (_, target) in zip(alternatives, longest, strict=True)]
        self._compiled: dict[int, re.Pattern[str]] = {}

    def has(self, key: str) -> bool:
        """Whether a term folds to ``key`` (``fold``)."""
        return key in self._targets

    def target(self, found: str) -> str:
        """The target for a text the pattern matched (the text itself for a term to keep)."""
        key = fold(found)
        if key in self._targets:
            target = self._targets[key]
        else:
            target = next(t for i, (_, t) in enumerate(self._each) if self._pattern_of(i).match(found))
        return found if target is None else target

    def _pattern_of(self, i: int) -> re.Pattern[str]:
        """Term ``i``'s own pattern, compiled the first time it is asked for."""
        if i not in self._compiled:
            self._compiled[i] = re.compile(self._each[i][0], re.IGNORECASE)
        return self._compiled[i]

    def search(self, text: str, at: int) -> re.Match[str] | None:
        """The first term in ``text`` from ``at`` on (a word boundary may look before ``at``)."""
        return self._pattern.search(text, at)

    def split(self, text: str) -> list[str | Term]:
        """``text`` as text and terms, in order (``[text]`` when no term occurs)."""
        return split_by((self,), text)


def split_by(matchers: Sequence[Matcher], text: str) -> list[str | Term]:
    """``text`` as text and the terms of any of ``matchers``, in order (``[text]`` when none occurs): the leftmost
    match first, the longest of those starting there, the earlier matcher's on a tie; never overlapping; the target
    that of the earliest matcher holding a term for that text (a request's entry replaces the file's for the same
    term, as ``fold`` compares them). A request's glossary, the server's and the runs the model cannot spell are
    separate matchers, so the server's (up to thousands of terms) is compiled once, not again for every request
    glossary and every item with its own runs."""
    pieces: list[str | Term] = []
    at = 0
    found = [m.search(text, 0) for m in matchers]
    while True:
        for i, match in enumerate(found):  # a matcher whose match another one's overlapped looks again, from here
            if match is not None and match.start() < at:
                found[i] = matchers[i].search(text, at)
        live = [(match.start(), -match.end(), i) for i, match in enumerate(found) if match is not None]
        if not live:
            break
        start, minus_end, i = min(live)
        if start > at:
            pieces.append(text[at:start])
        term = text[start:-minus_end]
        owner = next((m for m in matchers[:i] if m.has(fold(term))), matchers[i])
        pieces.append(Term(term, owner.target(term), owner.glued))
        at = -minus_end
    return [*pieces, text[at:]] if at < len(text) or not pieces else pieces


_END = ""  # a trie key no unit uses: a term ends here


def _trie_pattern(sources: Sequence[str], space: str) -> str:
    """A regular expression matching exactly ``sources`` (each a run of words; any whitespace between words, as
    ``space``), built as a trie of case-folded characters so shared prefixes are matched once."""
    trie: dict[str, Any] = {}
    for source in sources:
        node = trie
        for i, word in enumerate(source.split()):
            for unit in ([" "] if i else []) + [_unit(c) for c in word]:
                node = node.setdefault(unit, {})
        node[_END] = {}

    def pattern_of(u: str) -> str:
        return space if u == " " else re.escape(u)

    def emit(node: dict[str, Any]) -> str:
        chain = []  # a run of nodes with one child and no term ending: written in a loop, so a term as long as a
        while _END not in node and len(node) == 1:  # text (a kept run of 5,000 emoji) needs no deeper recursion
            (u, node), *_ = node.items()
            chain.append(pattern_of(u))
        branches = [pattern_of(u) + emit(child) for u, child in node.items() if u != _END]
        if not branches:
            return "".join(chain)
        body = branches[0] if len(branches) == 1 and _END not in node else f"(?:{'|'.join(branches)})"
        return "".join(chain) + (f"{body}?" if _END in node else body)

    return emit(trie)


def server_terms(glossary: ServerGlossary, source: str, target: str) -> tuple[GlossaryEntry, ...]:
    """The glossary file's entries for ``source`` -> ``target`` (codes in any case)."""
    return glossary.get((source.lower(), target.lower()), ())


@functools.lru_cache(maxsize=64)
def matcher(terms: Terms, html: bool) -> Matcher:
    """The compiled matcher of a request's glossary (a client's repeated one compiles once; one of 100 long terms
    compiles to about 1 MB, so a few dozen are kept)."""
    return Matcher(terms, html=html)


@functools.cache
def file_matcher(terms: Terms, html: bool) -> Matcher:
    """The compiled matcher of the glossary file's terms for a pair: kept for good (the file is read once), never
    pushed out by request glossaries (each miss compiled thousands of terms again on the event loop)."""
    return Matcher(terms, html=html)


class TextWithTerms:
    """A ``format: "text"`` item holding glossary terms: a plain-text unit, its sentences sent with placeholders."""

    def __init__(self, pieces: list[str | Term]) -> None:
        self._unit = Unit(list(pieces), html=False)
        self.sentences = self._unit.sentences

    def rejoin(self, translations: Sequence[str]) -> str:
        """The text with ``translations`` (one per sentence sent) in place of its sentences, terms put in."""
        return self._unit.render(translations, ())


def splitter(
    glossary: tuple[Terms, Terms] = ((), ()), runs: Terms = (), *, html: bool
) -> Callable[[str], list[str | Term]] | None:
    """How to cut a text into text and terms: those of ``glossary`` (``glossaries``: the request's, then the file's;
    each's matcher cached) and ``runs`` (one text's runs the model cannot spell, kept as written; a glossary term
    wins over a run that is the same text); None when there are none of them."""
    request, filed = glossary
    matchers = [
        *([matcher(request, html)] if request else []),
        *([file_matcher(filed, html)] if filed else []),
        *([Matcher(runs, html=html, glued=True)] if runs else []),
    ]
    return functools.partial(split_by, matchers) if matchers else None


def mask_text(text: str, glossary: tuple[Terms, Terms] = ((), ()), runs: Terms = ()) -> Segmented | TextWithTerms:
    """``text`` cut into sentences, its terms and runs (``splitter``) masked; exactly ``segment(text)`` when none
    occurs in it."""
    split = splitter(glossary, runs, html=False)
    pieces: list[str | Term] = split(text) if split is not None else [text]
    return TextWithTerms(pieces) if any(isinstance(p, Term) for p in pieces) else segment(text)


# --- the server's glossary file ------------------------------------------------------------------------------------


def entry_problem(error: Mapping[str, Any], data: Any, where: str) -> str:
    """What is wrong with a glossary, in our words; ``error`` is pydantic's, located below ``where`` in ``data``."""
    loc = [p for p in error.get("loc", ()) if p != "body"]
    value = data
    for step in loc:
        value = value.get(step) if isinstance(value, dict) else value[step] if isinstance(value, list) else None
    kind = error["type"]
    if len(loc) <= 1 or kind == "list_type":
        return f"{where} must be a list of terms, {SHAPE}, not {describe(value)}"
    item = f"{where} item {loc[1]}"
    if len(loc) == 2:
        return f"{item} must be an object with source and target, not {describe(value)}"
    field = str(loc[2])
    if kind == "extra_forbidden":
        return f"{item} has an unknown field {field!r}: an item takes source and target only"
    if kind == "missing":
        keep = " (null keeps the source term as it is)" if field == "target" else ""
        return f"{item}: {field} is required{keep}"
    if kind in ("string_too_short", "string_too_long"):
        return f"{item}: {field} must have 1 to {MAX_TERM_CHARS} characters, not {describe(value)}"
    if kind == "value_error":
        return f"{item}: {field} {error.get('ctx', {}).get('error', 'is not valid')}"
    if half_characters(value):
        return f"{item}: {field} {HALF_CHARACTERS}"
    rule = "a text" if field == "source" else "a text (the term to use) or null (keep the source term)"
    return f"{item}: {field} must be {rule}, not {describe(value)}"


def load_glossary_file(path: str) -> dict[Pair, tuple[GlossaryEntry, ...]]:
    """The glossary file's terms per language pair, its codes in lower case (``server_terms`` looks them up so);
    GlossaryFileError (one line: the file, where, what to fix)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise GlossaryFileError(f"cannot read the glossary file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise GlossaryFileError(f"glossary file {path} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise GlossaryFileError(
            f"glossary file {path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise GlossaryFileError(f'glossary file {path} must be a JSON object such as {{"en-de": {SHAPE}}}')
    out: dict[Pair, tuple[GlossaryEntry, ...]] = {}
    for key, items in data.items():
        pair = key.lower().split("-")  # codes in any case, as requests name them ("EN-DE" is en-de)
        if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
            raise GlossaryFileError(
                f"glossary file {path}: key {key!r} must name a language pair as source-target, such as 'en-de'"
            )
        try:
            entries = tuple(_ENTRIES.validate_python(items))
        except ValidationError as exc:
            error = exc.errors()[0]
            problem = entry_problem({**error, "loc": ("", *error["loc"])}, {"": items}, repr(key))
            raise GlossaryFileError(f"glossary file {path}: {problem}") from None
        twice = duplicate(entries)
        if twice:
            raise GlossaryFileError(f"glossary file {path}: {key!r} has {twice_text(twice)}: keep one")
        twin = next((other for other in data if other != key and other.lower() == key.lower()), None)
        if twin is not None:
            raise GlossaryFileError(
                f"glossary file {path}: keys {twin!r} and {key!r} name one language pair: merge them"
            )
        out[(pair[0], pair[1])] = entries
    return out
