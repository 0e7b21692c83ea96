"""POST /translate with format=html through the real app: real-world snippets, what is never translated, attributes,
entities, whitespace, malformed and hostile HTML, the cache, and a translator that mangles the placeholders.

The fake translator reverses and upper-cases the words of each sentence, so every expected output below shows where
each piece of text went; the real tiny model (random weights) checks the engine path."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser

from tests.service.harness import EN_DE, FakeTranslator, serve
from transduce.service.htmlkept import fragment_context

pytestmark = pytest.mark.anyio
HTML = {**EN_DE, "format": "html"}
TRANSLATED_ATTRIBUTES = {"title", "alt", "placeholder", "aria-label"}

MASTODON = (
    '<p><span class="h-card" translate="no"><a href="https://mastodon.social/@Gargron" class="u-url mention">'
    "@<span>Gargron</span></a></span> Thanks for the update! The new "
    '<a href="https://docs.joinmastodon.org/" target="_blank" rel="nofollow noopener noreferrer">documentation</a> '
    "is great.</p><p>Read more: "
    '<a href="https://blog.joinmastodon.org/2024/09/mastodon-4.3/" target="_blank" rel="nofollow noopener noreferrer">'
    '<span class="invisible">https://</span><span class="ellipsis">blog.joinmastodon.org/2024/09/</span>'
    '<span class="invisible">mastodon-4.3/</span></a> '
    '<a href="https://mastodon.social/tags/FediTips" class="mention hashtag" rel="tag">#<span>FediTips</span></a></p>'
)
README_FRAGMENT = """<h1 id="transduce">transduce</h1>
<p>A <strong>machine-translation</strong> server. Run <code>transduce serve</code> to start it.</p>
<h2>Install</h2>
<ul>
<li>Create a virtual environment.</li>
<li>Install the package with <code>pip install -e .</code> and wait.</li>
</ul>
<pre><code class="language-bash">transduce serve --port 5000
curl -s http://127.0.0.1:5000/health
</code></pre>
<p>See the <a href="#api">API section</a> for details &amp; examples.</p>"""
TABLE = """<table>
  <thead><tr><th>Setting</th><th title="What it does">Meaning</th></tr></thead>
  <tbody>
    <tr><td><code>max_chars</code></td><td>Characters per request. Beyond it: 413.</td></tr>
    <tr><td><code>cache_size</code></td><td>Translations kept in memory.</td></tr>
  </tbody>
</table>"""


def normal_form(html: str) -> str:
    """``html`` as the HTML parser reads and writes it back (in the context the service parses it in)."""
    return LexborHTMLParser(html, is_fragment=True, fragment_tag=fragment_context(html)).html or ""


def elements(html: str) -> Counter[str]:
    """Every element of ``html`` with its attributes (translated ones by name only), counted."""
    found: Counter[str] = Counter()
    for node in LexborHTMLParser(f"<div>{html}</div>", is_fragment=True).css("div *"):
        attrs = sorted((k, "" if k in TRANSLATED_ATTRIBUTES else v or "") for k, v in node.attributes.items())
        found[f"{node.tag} {attrs}"] += 1
    return found


def without_implied(html: str, source: str) -> str:
    """``html`` without the tags of the elements the parser adds where ``source`` leaves them out (a document's html,
    head and body, a table's tbody), which the service leaves out too."""
    for name in ("html", "head", "body", "tbody"):
        if re.search(rf"<{name}[\s/>]", source, re.I) is None:
            html = html.replace(f"<{name}>", "").replace(f"</{name}>", "")
    return html


def assert_same_markup(source: str, out: str) -> None:
    """``out`` is well-formed (the parser would write it back unchanged, but for the tags it adds where ``source``
    left them out) and holds every element of ``source`` (after the parser's own repairs), each exactly once, with
    its attributes."""
    assert without_implied(normal_form(out), source) == out, out
    assert elements(out) == elements(normal_form(source)), (source, out)


async def translate(client: Any, q: str | list[str], **extra: Any) -> Any:
    r = await client.post("/translate", json={"q": q, **HTML, **extra})
    assert r.status_code == 200, r.text
    return r.json()["translatedText"]


# --- real-world snippets -------------------------------------------------------------------------------------------


async def test_a_mastodon_post_keeps_mentions_hashtags_and_links() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        out = await translate(client, MASTODON)
    assert fake.translated[1:] == ["Thanks for the update!", "The new [1] documentation [2] is great.", "Read more:"]
    mention = MASTODON[: MASTODON.index(" Thanks")]
    link = MASTODON[MASTODON.index('<a href="https://blog') : MASTODON.index("</p>", MASTODON.index("Read more"))]
    assert out == (
        f"{mention} UPDATE! THE FOR THANKS GREAT. IS "
        '<a href="https://docs.joinmastodon.org/" target="_blank" rel="nofollow noopener noreferrer">DOCUMENTATION</a> '
        f"NEW THE</p><p>MORE: READ {link}</p>"
    )
    assert_same_markup(MASTODON, out)


async def test_a_readme_fragment_translates_prose_and_keeps_code() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        out = await translate(client, README_FRAGMENT)
    assert fake.translated[1:] == [
        "transduce",
        "A [1] machine-translation [2] server.",
        "Run [1] to start it.",
        "Install",
        "Create a virtual environment.",
        "Install the package with [1] and wait.",
        "See the [1] API section [2] for details & examples.",
    ]
    assert (
        out
        == """<h1 id="transduce">TRANSDUCE</h1>
<p>SERVER. <strong>MACHINE-TRANSLATION</strong> A IT. START TO <code>transduce serve</code> RUN</p>
<h2>INSTALL</h2>
<ul>
<li>ENVIRONMENT. VIRTUAL A CREATE</li>
<li>WAIT. AND <code>pip install -e .</code> WITH PACKAGE THE INSTALL</li>
</ul>
<pre><code class="language-bash">transduce serve --port 5000
curl -s http://127.0.0.1:5000/health
</code></pre>
<p>EXAMPLES. &amp; DETAILS FOR <a href="#api">SECTION API</a> THE SEE</p>"""
    )
    assert_same_markup(README_FRAGMENT, out)


async def test_a_table_translates_cell_by_cell() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        out = await translate(client, TABLE)
    assert fake.translated[1:] == [
        "Setting",
        "What it does",
        "Meaning",
        "Characters per request.",
        "Beyond it: 413.",
        "Translations kept in memory.",
    ]
    assert (
        out
        == """<table>
  <thead><tr><th>SETTING</th><th title="DOES IT WHAT">MEANING</th></tr></thead>
  <tbody>
    <tr><td><code>max_chars</code></td><td>REQUEST. PER CHARACTERS 413. IT: BEYOND</td></tr>
    <tr><td><code>cache_size</code></td><td>MEMORY. IN KEPT TRANSLATIONS</td></tr>
  </tbody>
</table>"""
    )


async def test_table_parts_sent_alone_keep_their_tags() -> None:
    """A fragment that starts with a cell, a row or a caption (a CMS translating a table piece by piece) is parsed as
    a browser parses a table's innerHTML: in a <div>'s, the parser dropped the tags and ran the cells together."""
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        cells = await translate(client, "<td>Hello world</td><td>Good night</td>")
        row = await translate(client, ' <!-- one row --><tr><th scope="row">Name</th><td>A <b>big</b> house</td></tr>')
        caption = await translate(client, "<caption>Settings</caption><colgroup><col span=2></colgroup>")
        kept = await translate(client, '<td translate="no"><style>a<b</style></td><td>Hello</td>')
    assert cells == "<td>WORLD HELLO</td><td>NIGHT GOOD</td>"
    assert row.startswith(' <!-- one row --><tr><th scope="row">NAME</th><td>') and row.endswith("</td></tr>")
    assert row.count("<b>") == 1 and row.count("</b>") == 1
    assert caption == '<caption>SETTINGS</caption><colgroup><col span="2"></colgroup>'
    assert kept == '<td translate="no"><style>a<b</style></td><td>HELLO</td>'
    assert "Hello world" in fake.translated and "Good night" in fake.translated


async def test_elements_the_parser_adds_come_back_only_where_they_were_sent() -> None:
    """The parser puts in a document's html, head and body and a table's tbody where the HTML leaves them out; they
    came back as though sent (``<head></head>`` in a page that had none)."""
    async with serve(FakeTranslator()) as (client, _):
        page = await translate(client, "<html><body><p>Hello world.</p></body></html>")
        table = await translate(client, "<table><tr><td>Good night</td></tr></table>")
        bare = await translate(client, "<!DOCTYPE html><title>Hello</title><p>Good night</p>")
        full = "<!DOCTYPE html><html><head><title>Hi</title></head><body><table><tbody><tr><td>A</td></tr></tbody>"
        written = await translate(client, full + "</table></body></html>")
    assert page == "<html><body><p>WORLD. HELLO</p></body></html>"
    assert table == "<table><tr><td>NIGHT GOOD</td></tr></table>"
    assert bare == "<!DOCTYPE html><title>HELLO</title><p>NIGHT GOOD</p>"
    assert written == full.replace("Hi<", "HI<") + "</table></body></html>"  # every tag as sent


# --- what is translated and what is not ----------------------------------------------------------------------------


async def test_code_pre_script_style_and_translate_no_are_never_sent() -> None:
    fake = FakeTranslator()
    kept = [
        "<pre>keep pre</pre>",
        "<script>var keep = 1 < 2;</script>",
        "<style>p > b { color: red }</style>",
        '<div translate="no">keep div <b>bold</b></div>',
        '<p class="lead notranslate">keep notranslate</p>',
        "<template><p>keep template</p></template>",
        '<svg viewBox="0 0 10 10"><text x="1">keep svg</text></svg>',
        "<math><mi>keep</mi></math>",
        "<textarea>keep textarea</textarea>",
        "<noframes><p>keep noframes</p></noframes>",  # raw text (the HTML probe: it came back translated, escaped)
        "<noembed><b>keep noembed</b></noembed>",
    ]
    inline = '<p>Say <code>keep code</code> and <kbd>Ctrl</kbd> to <span translate="no">Firefox</span> now.</p>'
    async with serve(fake) as (client, _):
        out = await translate(client, "\n".join([*kept, inline]))
    assert fake.translated[1:] == ["Say [1] and [2] to [3] now."]
    assert out == "\n".join(
        [*kept, '<p>NOW. <span translate="no">Firefox</span> TO <kbd>Ctrl</kbd> AND <code>keep code</code> SAY</p>']
    )


async def test_user_visible_attributes_are_translated_and_the_others_kept() -> None:
    fake = FakeTranslator()
    q = (
        '<p title="Read this" data-x="keep me" style="color: red" lang="en">Look <img src="cat.png" alt="A cat" '
        'width="10"> here. <input placeholder="Your name" value="keep value"> <a href="/a?b=1&amp;c=2" '
        'aria-label="Go home">Home</a></p><p translate="no" title="keep title">x</p>'
    )
    async with serve(fake) as (client, _):
        out = await translate(client, q)
    assert out == (
        '<p title="THIS READ" data-x="keep me" style="color: red" lang="en">HERE. <img src="cat.png" alt="CAT A" '
        'width="10"> LOOK <input placeholder="NAME YOUR" value="keep value"> <a href="/a?b=1&amp;c=2" '
        'aria-label="HOME GO">HOME</a></p><p translate="no" title="keep title">x</p>'
    )


async def test_entities_stay_valid_html_and_whitespace_between_blocks_is_kept() -> None:
    fake = FakeTranslator()
    q = "\n\n  <p>Fish &amp; chips &lt;3&nbsp;now\n   and caf&eacute; &#169;.</p>\n\t<p>\n  Next.\n</p>  \n"
    async with serve(fake) as (client, _):
        out = await translate(client, q)
    # a line break inside a paragraph is a space in HTML: it does not end the sentence (text mode would cut there)
    assert fake.translated[1:] == ["Fish & chips <3\u00a0now and café ©.", "Next."]
    assert (
        out == "\n\n  <p>©. CAFÉ AND NOW &lt;3 CHIPS &amp; FISH</p>\n\t<p>\n  NEXT.\n</p>  \n"
    )  # (the fake splits at the nbsp)


async def test_line_breaks_end_sentences_and_a_whole_document_comes_back_as_one() -> None:
    fake = FakeTranslator()
    document = (
        '\n<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>My page</title></head>'
        "<body><p>First line<br>second line</p></body></html>\n"
    )
    async with serve(fake) as (client, _):
        out = await translate(client, [document, "plain text, no tags", '<body class="a"><p>Only a body.</p></body>'])
    assert out == [  # the blanks before the doctype, after it and after </html> as written (a parser drops them)
        '\n<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>PAGE MY</title></head>'
        "<body><p>LINE FIRST<br>LINE SECOND</p></body></html>\n",
        "TAGS NO TEXT, PLAIN",
        '<body class="a"><p>BODY. A ONLY</p></body>',  # a document too: its body tag kept, nothing added
    ]


async def test_blank_and_markup_only_items_are_not_decoded() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        out = await translate(client, ["", "  \n", '<img src="x.png"><br>', "<p> </p><!-- note --><p>&nbsp;</p>"])
    assert out == ["", "  \n", '<img src="x.png"><br>', "<p> </p><!-- note --><p>&nbsp;</p>"]
    assert fake.translated[1:] == []


async def test_form_bodies_alternatives_and_source_auto() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post(
            "/translate", data={"q": "<b>guten tag</b>", "source": "de", "target": "en", "format": "html"}
        )
        assert r.json() == {"translatedText": "<b>TAG GUTEN</b>"}
        r = await client.post("/translate", json={"q": "<p>Go <i>home</i> now</p>", **HTML, "alternatives": 1})
        assert r.json() == {
            "translatedText": "<p>NOW <i>HOME</i> GO</p>",
            "alternatives": ["<p>NOW <i>HOME</i> GO #1</p>"],
        }
        q = '<p class="the and of with">Guten Morgen, wie geht es dir heute?</p>'
        r = await client.post("/translate", json={"q": q, "source": "auto", "target": "en", "format": "html"})
    assert r.status_code == 200, r.text
    assert r.json()["detectedLanguage"]["language"] == "de"  # read from the text, not the markup
    assert r.json()["translatedText"] == '<p class="the and of with">HEUTE? DIR ES GEHT WIE MORGEN, GUTEN</p>'


# --- limits, the cache, malformed and hostile input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "status", "message"),
    [
        ("<p>" + "x" * 4994 + "</p>", 413, "request (5001 characters) exceeds the limit of 5000 characters"),
        ("<b>" * 200 + "deep", 400, "q nests HTML elements more than 128 deep"),
        ("<div>" * 129 + "deep", 400, "q nests HTML elements more than 128 deep"),
        ("<p>" + "w " * 100 + "<b>x</b> " * 50 + "</p>", 400, "over the limit of 200 (max_sentence_tokens)"),
    ],
)
async def test_html_limits(q: str, status: int, message: str) -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await client.post("/translate", json={"q": q, **HTML})
    assert (r.status_code, list(r.json())) == (status, ["error"]), r.text
    assert message in r.json()["error"]
    assert len(fake.calls) == 1


HOSTILE = [
    "<p>unclosed <b>bold <i>italic</p><p>next",
    "</div></p>stray end tags</b>",
    "<p>a<b>b<p>c</b>d",
    "<table><tr><td>cell<p>para</td></table>text after",
    "<!-- comment --><![CDATA[ cdata ]]><?php echo 1 ?> after",
    "<!-- never closed",
    "<template><p>inert</p></template><p>live text</p>",
    "<svg><foreignObject><p>inside svg</p></foreignObject></svg><math><mtext>m</mtext></math> tail",
    '<a title="' + "t" * 3000 + '" href="' + "h" * 900 + '">huge attributes</a>',
    "<script>document.write('<p>x</p>')",
    "<p>null\x00char and \ud800 lone surrogate</p>",
    "<p>" + "<span>" * 120 + "nested spans" + "</span>" * 120 + "</p>",
    "<b><i><u><s>" * 30 + "formatting soup",
    '<p <p>="" a=b=c "quoted">weird attributes</p>',
    "<select><option>one<option>two</select><button>Press</button>",
]


async def test_malformed_and_hostile_html_is_repaired_never_a_500() -> None:
    fake = FakeTranslator()
    async with serve(fake, max_chars=20_000) as (client, _):
        body = json.dumps({"q": HOSTILE, **HTML})  # ASCII JSON: the lone surrogate travels as \\ud800
        r = await client.post("/translate", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        for source, out in zip(HOSTILE, r.json()["translatedText"], strict=True):
            assert_same_markup(source.replace("\ud800", "\ufffd"), out)
        assert r.json()["translatedText"][0] == "<p>ITALIC BOLD <b><i>UNCLOSED</i></b></p><p><b><i>NEXT</i></b></p>"
        plaintext = "<p>Text.</p><plaintext><p>all the rest is text"  # can never close: kept as the parser reads it
        assert await translate(client, plaintext) == "<p>TEXT.</p><plaintext><p>all the rest is text</plaintext>"
        assert (await client.get("/health")).status_code == 200


async def test_the_cache_keys_by_what_the_model_sees_and_renders_each_requests_own_markup() -> None:
    fake = FakeTranslator()
    async with serve(fake, cache_size=100) as (client, _):
        first = await translate(client, "<p>Click <b>Save</b> now.</p>")
        second = await translate(client, '<p>Click <a href="/s">Save</a> now.</p>')  # same sentence for the model
        third = await translate(client, "<p>Click <b>Save</b> now &amp; then.</p>")
        r = await client.post("/translate", json={"q": "Click [1] Save [2] now &amp; then.", **EN_DE})
        status = (await client.get("/latency")).json()
    assert first == "<p>NOW. <b>SAVE</b> CLICK</p>"
    assert second == '<p>NOW. <a href="/s">SAVE</a> CLICK</p>'
    assert third == "<p>THEN. &amp; NOW <b>SAVE</b> CLICK</p>"
    assert r.json() == {"translatedText": "THEN. &AMP; NOW [2] SAVE [1] CLICK"}  # text: the entity is text
    assert fake.translated[1:] == [
        "Click [1] Save [2] now.",
        "Click [1] Save [2] now & then.",
        "Click [1] Save [2] now &amp; then.",
    ]
    assert status["cache"]["hits"] == 1


def test_html_keeps_its_crlf_line_ends() -> None:
    """The HTML parser reads every CRLF as LF: a CRLF page came back LF, its <pre> and <script> too."""
    from transduce.service.documents import read_document
    from transduce.service.htmldoc import parse_html

    page = (
        "<!DOCTYPE html>\r\n<html>\r\n<head>\r\n<title>Hello world</title>\r\n<script>\r\nvar a = 1;\r\n</script>\r\n"
        "</head>\r\n<body>\r\n<p>Hello world.</p>\r\n<pre>line one\r\nline two</pre>\r\n</body>\r\n</html>\r\n"
    )
    doc = read_document("page.html", page.encode())
    out = doc.rebuild(list(doc.units)).decode()
    assert "\n" not in out.replace("\r\n", "")  # every line end a CRLF, none doubled ("\r\r\n")
    for kept in ("<pre>line one\r\nline two</pre>", "<script>\r\nvar a = 1;\r\n</script>", "<!DOCTYPE html>\r\n"):
        assert kept in out
    fragment = "<p>a b.</p>\r\n<p>c d.</p>"  # format: "html" in /translate
    item = parse_html(fragment)
    assert item.rejoin(list(item.sentences)) == fragment
    lf = "<p>a b.</p>\n<p>c\r\nd.</p>\n"  # mostly LF: LF throughout, as the parser reads it
    assert parse_html(lf).rejoin(list(parse_html(lf).sentences)).count("\r") == 0
