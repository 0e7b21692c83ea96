"""Requests within the limits whose text made a regular expression backtrack for seconds (found by an audit on
2026-11-27): ``re`` holds the interpreter while it matches, so one such request held every other one too."""

from __future__ import annotations

import io
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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


def _docx(build: Callable[[Any], None]) -> bytes:
    import docx

    document = docx.Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _merged_rows(document: Any) -> None:
    """A table of 3,000 rows whose first column is one vertically merged cell."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    table = document.add_table(rows=3_000, cols=2)
    table.cell(0, 0).text = "Top"
    for i, row in enumerate(table._tbl.tr_lst):
        row.tc_lst[1].p_lst[0].add_r().add_t(f"Row {i}")
        merge = OxmlElement("w:vMerge")
        if i == 0:
            merge.set(qn("w:val"), "restart")
        row.tc_lst[0].get_or_add_tcPr().append(merge)


def _wide_cell(document: Any) -> None:
    """One cell spanning 300,000 grid columns."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    table = document.add_table(rows=1, cols=1)
    table.cell(0, 0).text = "Wide"
    span = OxmlElement("w:gridSpan")
    span.set(qn("w:val"), "300000")
    table._tbl.tr_lst[0].tc_lst[0].get_or_add_tcPr().append(span)


def _long_run(document: Any) -> None:
    """One run of 30,000 pieces of text, each followed by a line break."""
    run = document.add_paragraph().add_run()._r
    for i in range(30_000):
        run.add_t(f"w{i % 10}")
        run.add_br()


def test_docx_tables_of_merged_rows_wide_cells_and_a_run_of_many_pieces_take_linear_time() -> None:
    """python-docx's table model walked every vertically merged cell up to its first (500 rows: 8.8 s; about 1,000 a
    RecursionError, a 500) and gave a spanning cell once per grid column (13 s); its XPath unions read and cleared a
    run's text in time quadratic in the run's children (30,000 pieces: 11 s to read, 12 s to write back)."""
    merged, wide, long = _docx(_merged_rows), _docx(_wide_cell), _docx(_long_run)
    with within(10):  # about 2.5 s here; 45 s and a RecursionError before
        documents = [read_document(f"{n}.docx", data) for n, data in (("a", merged), ("b", wide), ("c", long))]
        rebuilt = [d.rebuild([u.upper() for u in d.units]) for d in documents]
    assert documents[0].units == ["Top", *(f"Row {i}" for i in range(3_000))]  # the merged cell once
    assert documents[1].units == ["Wide"]
    assert documents[2].units == [f"w{i % 10}" for i in range(30_000)]
    back = read_document("c.docx", rebuilt[2])
    assert back.units == [f"W{i % 10}" for i in range(30_000)]


def test_nested_inline_elements_over_a_block_are_told_apart_in_linear_time() -> None:
    """Whether an element is inline walked its whole subtree, again at every level of nesting: 120 nested inline
    elements holding a block and 50,000 line breaks (a 200,000-character .html file) took 6 s."""
    html = "<b>" * 120 + "<p>x</p>" + "<br>" * 50_000
    with within(3):  # 0.4 s here
        item = parse_html(html)
    assert item.sentences == ("x",)
    assert parse_html("<p>Say <b>hi <i>there</i></b> now.</p><b>Bold <div>block</div></b>").sentences == (
        "Say [1] hi [2] there [3] [4] now.",
        "Bold",
        "block",
    )
