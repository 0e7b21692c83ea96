"""Requests within the limits whose text made a regular expression backtrack for seconds (found by an audit on
2026-11-27): ``re`` holds the interpreter while it matches, so one such request held every other one too."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from transduce.service.documents import read_document
from transduce.service.glossary import Matcher, duplicate, fold
from transduce.service.htmldoc import parse_html
from transduce.service.schemas import GlossaryEntry


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail (TimeoutError) instead of waiting past ``seconds``: the old patterns took up to minutes."""

    def too_slow(signum: int, frame: object) -> None:
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_long_word_of_at_signs_and_periods_in_nested_inline_html() -> None:
    """Whether an inline element's text is an e-mail address tried every "@" against every "." of a text without
    spaces, again at every level of nesting: 29 s for this 5,000-character q."""
    q = "<b>" * 120 + "a" + "@" * 2400 + "." * 2400 + "!"
    with within(5):
        item = parse_html(q)
    assert len(item.sentences) == 1
    handle = parse_html('<p>Mail <a href="mailto:me@example.com">me@example.com</a> or <b>@ann</b> today.</p>')
    assert handle.sentences == ("Mail [1] or [2] today.",)  # an address and a mention stay as they are


def test_a_markdown_file_of_unclosed_footnote_marks() -> None:
    """A footnote reference was searched to the end of a run without spaces from every "[^" (minutes for the
    200,000 characters a file may hold)."""
    with within(5):
        document = read_document("notes.md", b"[^" * 50_000)
    assert document.units == ["[^" * 50_000]
    assert read_document("notes.md", b"See [^note] here.\n").units == ["See [1] here."]  # a reference stays as is


def test_terms_that_differ_in_a_dotless_i_are_one_term() -> None:
    """``re`` holds "i" and "ı" equal when case is ignored, case-folding does not: the trie kept them as branches
    the pattern had to try one by one (100 such terms: about 1 s for a q of 5,000 characters), and they were not told
    as the same term."""
    assert fold("Iı ſ İ") == fold("iI s i")
    twice = duplicate([GlossaryEntry(source="pi b", target="x"), GlossaryEntry(source="pı B", target="y")])
    assert twice == ("pi b", "pı B")
    matcher = Matcher((("pı b", "PI-B"),), html=False)
    assert [str(p) if isinstance(p, str) else p.target for p in matcher.split("a PI b c")] == ["a ", "PI-B", " c"]


def test_a_term_found_only_by_its_own_pattern_compiles_it_once() -> None:
    """Where case-folding and ``re`` differ, a match is told by the terms' own patterns: compiled through ``re``'s
    shared cache of 512, a glossary of more terms compiled them again at every match (2.7 s for 20 matches)."""
    terms = tuple((f"filler{i}", f"F{i}") for i in range(600)) + (("Straße", "street"),)
    matcher = Matcher(terms, html=False)
    matcher._targets.clear()  # every match told by the patterns, as one that folds to no term is
    with within(5):
        pieces = matcher.split("Straße " * 1000)
    assert sum(1 for p in pieces if not isinstance(p, str) and p.target == "street") == 1000


def test_many_translated_attributes_and_breaks_between_edge_marks_take_linear_time() -> None:
    """Not regular expressions, but the same kind of cost (the audit that followed): each translated attribute counted
    every slot before it (11 s for a 200,000-character page of titles), and a separator grown with += over a run of
    line breaks and edge marks (2.6 s for 200,000 characters)."""
    from transduce.engine.text import segment

    with within(5):
        item = parse_html('<p title="a">b</p>' * 12_000)
        assert item.rejoin(list(item.sentences)) == '<p title="a">b</p>' * 12_000
        for _ in range(4):
            parts = segment("a" + "\u2028\u200b" * 100_000 + "b")
    assert parts.sentences == ("a", "b") and parts.rejoin(list(parts.sentences)) == "a" + "\u2028\u200b" * 100_000 + "b"
