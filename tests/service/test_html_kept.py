"""Markup sent back as it came parses back into the tree it came as: text that SVG or MathML held (entities decoded
by the parser) never comes back as live markup (mutation XSS, from the HTML probe of 2026-11-26), while the text
of HTML scripts and styles stays as written; a document's doctype comes back as written."""

from __future__ import annotations

import pytest
from selectolax.lexbor import LexborHTMLParser

from tests.service.harness import FakeTranslator, serve
from tests.service.test_app_html import HTML
from transduce.service.htmldoc import parse_html

INJECTIONS = [
    "<p>An icon <svg><style>&lt;/style&gt;&lt;img src=x onerror=alert(1)&gt;</style></svg> here.</p>",
    "<p>An icon <svg><script>&lt;img src=x onerror=alert(2)&gt;</script></svg> here.</p>",
    *(
        f"<p>Mark <math><{name}>&lt;/{name}&gt;&lt;img src=x onerror=alert(3)&gt;</{name}></math> up.</p>"
        for name in ("style", "xmp", "noembed", "noframes", "iframe")
    ),
    "<p>Icon <svg><g><title>x</title><style>&lt;img src=x onerror=alert(4)&gt;</style></g></svg> end.</p>",
    "<p>Sum <math><mtext><table><mglyph><style><img src=x onerror=alert(8)></style></mglyph></table></mtext></math>"
    " ok.</p>",
    "<p>Text <svg><plaintext>&lt;img src=x onerror=alert(9)&gt;</plaintext></svg> here.</p>",
    '<div translate="no"><svg><style>&lt;/style&gt;&lt;img src=x onerror=alert(5)&gt;</style></svg></div>',
    "<!DOCTYPE html><html><body><p>Page <svg><style>&lt;/style&gt;&lt;img src=x onerror=alert(6)&gt;</style></svg>"
    " text.</p></body></html>",
    # from the review of the fix: a template's content (which the check did not see), an mglyph that the parser
    # reads as HTML in one place and as MathML in another, and <noscript> read as markup (browsers that run scripts
    # read it as text)
    "<p>Hi <template><svg><style>&lt;/template&gt;&lt;img src=x onerror=alert(10)&gt;</style></svg></template> t.</p>",
    "<p>Sum <math><mtext><table><mglyph><template><img src=x onerror=alert(11)></template></mglyph></table></mtext>"
    "</math> ok.</p>",
    "<p>Sum <math><mtext><table><malignmark><template><img src=x onerror=alert(12)></template></malignmark></table>"
    "</mtext></math> ok.</p>",
    "<p>Hello <noscript><p><img src=x onerror=alert(13)></noscript> world.</p>",
    "<!DOCTYPE html><html><head><noscript><img src=x onerror=alert(14)></noscript></head><body><p>x</p></body></html>",
]


def handlers(html: str, scripting: bool = True) -> list[str]:
    """Every element with an event-handler attribute, as a browser parses ``html`` (Lexbor runs the HTML Standard's
    algorithm), one that runs scripts or (``scripting=False``) one that does not; a template's content is inert."""
    document = html.lstrip().lower().startswith("<!doctype")
    parser = LexborHTMLParser(html, scripting=scripting, is_fragment=not document)
    root = parser.root
    nodes = [*root.traverse(include_text=False)] if root is not None else []
    node = root.next if root is not None else None
    while node is not None:  # a fragment's other top-level nodes
        nodes += [*node.traverse(include_text=False)]
        node = node.next
    return [f"{n.tag} {k}" for n in nodes if n.is_element_node for k in n.attributes if k.startswith("on")]


def kept(html: str) -> str:
    """``html`` rebuilt around its own sentences (nothing translated)."""
    item = parse_html(html)
    return item.rejoin(list(item.sentences))


@pytest.mark.parametrize("html", INJECTIONS)
def test_text_held_by_svg_or_mathml_never_comes_back_as_markup(html: str) -> None:
    assert handlers(html) == []  # the input holds no live handler (where scripts run)
    out = kept(html)
    assert handlers(out) == [], out
    assert handlers(kept(out)) == []  # nor does the output sent through again
    assert len(handlers(out, scripting=False)) <= len(handlers(html, scripting=False))


def test_what_the_serialiser_writes_faithfully_is_kept_as_it_writes_it() -> None:
    script = '<p>Go <script>if (a < b && c > d) { s = "</p>"; }</script> on.</p>'
    assert '<script>if (a < b && c > d) { s = "</p>"; }</script>' in kept(script)  # HTML script text as written
    style = "<p>See <style>a > b { content: '&amp;' }</style> this.</p>"
    assert "<style>a > b { content: '&amp;' }</style>" in kept(style)
    html_in_svg = '<p>Icon <svg viewBox="0 0 9 9"><foreignObject><style>a<b</style></foreignObject></svg> end.</p>'
    assert '<svg viewBox="0 0 9 9"><foreignObject><style>a<b</style></foreignObject></svg>' in kept(html_in_svg)
    escaped = "<p>Icon <svg><style>&lt;/style&gt;&lt;img src=x&gt;</style><path d='M0'/></svg> end.</p>"
    assert '<svg><style>&lt;/style&gt;&lt;img src=x&gt;</style><path d="M0"></path></svg>' in kept(escaped)


def test_a_doctype_comes_back_as_written() -> None:
    quirks = '<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">\n<html><body><p>Hi.</p></body></html>'
    assert kept(quirks).startswith('<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">')
    commented = "<!-- generated --><!doctype html><html><body><p>Hi.</p></body></html>"
    assert "<!doctype html>" in kept(commented)
    # a comment ends where the tokenizer ends it ("--!>"): not the later doctype, which is text of the body
    tricky = '<!--a--!><!doctype html><p>Hi.</p><!-- --><!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01//EN">'
    assert kept(tricky).startswith("<!--a--><!doctype html><p>") and "4.01" not in kept(tricky)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_through_the_app_and_as_a_file() -> None:
    html = INJECTIONS[0]
    async with serve(FakeTranslator()) as (client, _):
        r = await client.post("/translate", json={"q": html, **HTML})
        assert r.status_code == 200 and handlers(r.json()["translatedText"]) == []
        files = {"file": ("page.html", html.encode(), "text/html")}
        r = await client.post("/translate_file", data={"source": "en", "target": "de"}, files=files)
        assert r.status_code == 200, r.text
        download = await client.get(r.json()["translatedFileUrl"])
        assert download.status_code == 200 and handlers(download.text) == [], download.text


def test_runs_of_comments_are_read_in_linear_time() -> None:
    """Where a fragment starts, and whether it is a document, was matched with backtracking into each comment: a
    request of 30 empty comments and a letter held the interpreter (and so every request) for minutes."""
    import signal

    from transduce.service.htmlkept import fragment_context

    def too_slow(signum: int, frame: object) -> None:
        raise TimeoutError("a run of comments took more than 5 s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(5)
    try:
        assert fragment_context("<!---->" * 40 + "x") == "div"
        assert fragment_context("<!---->" * 40 + "<td>x</td>") == "tr"
        assert kept("<!---->" * 40 + "x") == "<!---->" * 40 + "x"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "html",
    [
        "<!DOCTYPE html><title>t</title></head><!--c--> <p>x</p>",
        "<!DOCTYPE html><title>t</title></body><style>p{}</style><p>x</p>",
        "<!DOCTYPE html><p>x</p></body><!--after-->",
        "<!DOCTYPE html><p>x</p></html><!--after-->",
        "<!DOCTYPE html><table><tr><td>a</td></tr></tbody><tr><td>b</td></tr></table>",
        "<!DOCTYPE html>\n<!-- a -->\n<title>T</title>\n<p>Hi</p>\n",
    ],
)
def test_a_document_without_the_tags_the_parser_adds_parses_back_the_same(html: str) -> None:
    """The html, head, body and tbody a parser adds are not written back where the page wrote neither their start nor
    their end tag: an end tag alone decides where what follows it goes."""
    out = kept(html)
    assert LexborHTMLParser(out, scripting=True).html == LexborHTMLParser(html, scripting=True).html, out


@pytest.mark.parametrize(
    "html",
    [
        '<table translate="no"><tr><td>Keep</td></tr></table><p>Hi.</p>',
        '<div class="notranslate"><table><col span="2"><tr><td>Keep</td></tr></table></div><p>Hi.</p>',
        '<div>Hi <table translate="no"><tr><td>x</td></tr></table> there.</div>',
        '<!DOCTYPE html><table translate="no"><tr><td>Keep</td></tr></table><p>Hi.</p>',
    ],
)
def test_a_kept_table_comes_back_without_the_tags_the_parser_adds(html: str) -> None:
    """A table sent back untranslated had gained the ``<tbody>`` (and ``<colgroup>``) the parser puts in, which a
    translated table does not get: both come back as written."""
    out = kept(html)
    assert "tbody" not in out and "colgroup" not in out, out
    assert LexborHTMLParser(out, scripting=True).html == LexborHTMLParser(html, scripting=True).html, out
    written = '<table translate="no"><tbody><tr><td>Keep</td></tr></tbody></table><p>Hi.</p>'
    assert kept(written).count("tbody") == 2  # written: kept


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("<col span=2>Hello <b>world</b><p>Good night</p>", '<col span="2">Hello <b>world</b><p>Good night</p>'),
        ("<!--><td>a</td><td>b</td>", "<!----><td>a</td><td>b</td>"),  # "<!-->" is a whole comment
        ("<!--><div>x</div><!-- --><td>y</td>", "<!----><div>x</div><!-- -->y"),  # a <div> first: a <div>'s content
        ("\u00a0<td>a</td>", "&nbsp;a"),  # a no-break space is text, not a blank: a <div>'s content
    ],
)
def test_a_table_part_is_parsed_in_its_table_only_where_the_fragment_starts_with_it(html: str, expected: str) -> None:
    """A <col> first is parsed in a <table> (in a <colgroup> the parser dropped all the rest), and what comes first
    is read as the tokenizer reads it."""
    assert kept(html) == expected


def test_a_context_that_would_drop_text_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a table context drop what a table cannot hold (as a <colgroup> drops all but <col>s), the fragment is
    parsed as a <div>'s content instead: markup may be repaired, text is never lost."""
    from transduce.service import htmlkept

    monkeypatch.setitem(htmlkept.CONTEXT, "col", "colgroup")
    assert htmlkept.fragment_context("<col>Hello") == "colgroup"
    assert kept("<col span=2>Hello <b>world</b>") == "Hello <b>world</b>"
