"""``format: "html"``: an HTML fragment (or a whole document) parsed into translatable units and rebuilt around their
translations, with its tags, attributes, entities and whitespace between blocks kept.

The parser is selectolax's Lexbor backend: the HTML Standard's own parsing algorithm (as browsers run it), so
malformed input is repaired as a browser would repair it (unclosed tags closed, stray end tags dropped, misnested
formatting re-nested, CDATA read as a comment), in C, without recursion. A fragment is parsed as a ``<div>``'s
content (as ``innerHTML``), or one that starts with a table part (``<td>``, ``<tr>``, ``<caption>``, ...) as the
content of the element that holds it (``htmlkept.CONTEXT``); input that starts with ``<!DOCTYPE`` or ``<html>`` is
parsed as a document and comes back as one.

- Block elements (anything that is not inline: ``p``, ``li``, ``td``, ``h1``, ``div``, ``title``, ``button``, ...)
  are units of their own: their inline content is translated sentence by sentence (``htmlunits.Unit``).
- Inline elements (``INLINE``) are translated inside their sentence; an inline element holding a block is a block.
- Never translated, and sent as they are: ``code``, ``kbd``, ``samp``, ``var``, ``pre``, ``script``, ``style``,
  ``noembed``, ``noframes``,
  ``template``, ``textarea``, SVG, MathML, embedded content, anything with ``translate="no"`` or the class
  ``notranslate`` (Google's), and a link or span whose text is one @mention, #hashtag or URL (Mastodon's).
- Attributes are kept as sent, except the ones people read: ``title``, ``alt``, ``placeholder`` and ``aria-label``
  are translated (the HTML Standard lists them among its translatable attributes), unless ``translate="no"``.
- Text comes back as the HTML serializer writes it: characters, with ``&amp;``, ``&lt;``, ``&gt;`` and ``&nbsp;``
  (and ``&quot;`` in attributes) escaped, so ``&amp;`` stays an escaped ampersand and ``&eacute;`` becomes ``é``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser, LexborNode

from transduce.engine.text import Segmented, segment
from transduce.service.errors import ApiError
from transduce.service.htmlkept import (
    BLANK,
    BLANKS,
    LEADING,
    children,
    comment_html,
    fragment_context,
    fragment_nodes,
    kept_html,
)
from transduce.service.htmlnodes import Atom, AttrSlot, Inline, Node, Tag, Term
from transduce.service.htmlunits import Unit
from transduce.textmarks import line_end

MAX_DEPTH = 128  # elements nested deeper than this are refused (400): real pages stay far below it


def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


INLINE = _names(
    "a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark nobr output q s small span strike strong "
    "sub sup time tt u"
)
# kept inside the sentence as they are, never translated (void elements with a translated attribute excepted)
KEPT_INLINE = _names(
    "code kbd samp var svg math textarea script style template iframe video audio canvas object embed picture "
    "noscript noembed noframes ruby meter progress slot"
)
SILENT = _names("script style template wbr noembed noframes")  # invisible: not sent to the model
VOID = _names("area base basefont bgsound br col embed frame hr img input keygen link meta param source track wbr")
VOID_INLINE = _names("br wbr img input embed")
KEPT_BLOCK = _names("pre listing xmp plaintext")
TRANSLATED_ATTRIBUTES = frozenset(("title", "alt", "placeholder", "aria-label"))
# a mention, hashtag, URL or e-mail address (an address's name holds no "@": with "\S+@" every "@" of a text without
# spaces was tried against every ".", and nested elements test the same text again: 29 s for one 5,000-character q)
_HANDLE = re.compile(r"[@#]\S+|(?:https?://|www\.)\S+|[^\s@]+@\S+\.\w+")
_DOCUMENT = re.compile(rf"{LEADING}<(?:!doctype|(?:html|head|body)[\s>/])", re.IGNORECASE | re.DOTALL)
_LAST_TAG = re.compile(rf"</(?:body|html){BLANK}*>\Z", re.IGNORECASE)  # where blanks after it are the file's own
_LAST_TAG_LENGTH = 64  # characters at a document's end that _LAST_TAG reads
_DOCTYPE = re.compile(rf"{LEADING}(<!doctype\b[^>]*>)", re.IGNORECASE | re.DOTALL)  # up to its first >
_XML_PROLOG = re.compile(r"\s*<\?xml\b[^>]*\?>\s*", re.IGNORECASE)  # an XHTML file's first line: kept as written
# the HTML parser drops a newline right after these start tags, and Lexbor's serialiser does not write the one the
# HTML Standard's serialisation adds back ("<pre>\n\nfoo" came back as "<pre>\nfoo", one blank line fewer)
_NEWLINE_DROPPED = re.compile(r"^(<(?:pre|listing|textarea)(?=[\s/>])[^>]*>)(?=\n)", re.IGNORECASE)
_ENCODING = re.compile(r"""(\bencoding\s*=\s*["'])([^"']*)(["'])""")  # of an XML declaration
_CHARSET = re.compile(r"(charset\s*=\s*)([\w.:-]+)()", re.IGNORECASE)  # in a Content-Type meta's content


def _translate_no(node: LexborNode) -> bool:
    """``translate="no"`` or Google's ``class="notranslate"``."""
    attrs = node.attributes
    return (attrs.get("translate") or "").strip().lower() == "no" or "notranslate" in (attrs.get("class") or "").split()


def _is_inline(node: LexborNode, known: dict[int, bool]) -> bool:
    """Phrasing content all the way down (an inline element holding a block is laid out as a block). Every element's
    answer is kept in ``known`` (by Lexbor's node address, for one parse): asked again at each level of nesting, the
    walk down each subtree was quadratic (127 nested inline elements over 200,000 characters: 6 s)."""
    stack = [(node, False)]
    while stack:
        element, seen = stack.pop()
        key = element.mem_id
        if key in known:
            continue
        name = element.tag or ""
        if name in KEPT_INLINE or name in VOID_INLINE or name not in INLINE:
            known[key] = name in KEPT_INLINE or name in VOID_INLINE
            continue
        inner = [child for child in children(element) if child.is_element_node]
        if seen:  # (its element children all known by now)
            known[key] = all(known[child.mem_id] for child in inner)
        else:
            stack.append((element, True))
            stack += ((child, False) for child in inner)
    return known[node.mem_id]


_LINE_ENDS = re.compile(r"\r\n?|\n")


@dataclass(frozen=True)
class _AttrText:
    """A translated attribute value, cut into sentences as plain text is."""

    text: Segmented


class HtmlItem:
    """One ``q`` entry with ``format: "html"``: its sentences (every unit's and every translated attribute's, in
    document order) and the HTML rebuilt from their translations; the same two members as ``Segmented``."""

    def __init__(self, parts: list[str | Tag | Unit], slots: list[Unit | _AttrText], newline: str = "\n") -> None:
        self._parts, self._slots = parts, slots
        self.sentences = tuple(s for slot in slots for s in self._slot_sentences(slot))
        self.newline = newline  # the source's usual line end: the parser reads every one as LF (line_end)

    @staticmethod
    def _slot_sentences(slot: Unit | _AttrText) -> tuple[str, ...]:
        return slot.text.sentences if isinstance(slot, _AttrText) else slot.sentences

    @property
    def text(self) -> str:
        """The text to translate, without markup (for language detection)."""
        return "\n".join(" ".join(self._slot_sentences(s)) if isinstance(s, _AttrText) else s.text for s in self._slots)

    def with_terms(self, split: Callable[[str], list[str | Term]]) -> HtmlItem:
        """This item with glossary terms in its translatable text (``split`` cuts a text into text and ``Term``s),
        never in markup, attributes or what is not translated; the units without a term are kept as they are."""
        new = {
            id(u): Unit(nodes) for u in self._slots if isinstance(u, Unit) and (nodes := _with_terms(u.nodes, split))
        }
        if not new:
            return self
        parts = [new.get(id(p), p) if isinstance(p, Unit) else p for p in self._parts]
        return HtmlItem(parts, [new.get(id(s), s) if isinstance(s, Unit) else s for s in self._slots], self.newline)

    def rejoin(self, translations: Sequence[str]) -> str:
        """The HTML with ``translations`` (one per sentence, in order) in place of its sentences."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        values: list[str] = []  # the translated attribute values, by AttrSlot index
        mine: dict[int, Sequence[str]] = {}  # id(unit) -> its translations
        at = 0
        for slot in self._slots:
            n = len(self._slot_sentences(slot))
            if isinstance(slot, _AttrText):
                values.append(slot.text.rejoin(translations[at : at + n]))
            else:
                mine[id(slot)] = translations[at : at + n]
            at += n
        html = "".join(
            part
            if isinstance(part, str)
            else part.start(values)
            if isinstance(part, Tag)
            else part.render(mine.get(id(part), ()), values)
            for part in self._parts
        )
        return _LINE_ENDS.sub(self.newline, html) if self.newline != "\n" else html  # (parts kept as written too)


def _with_terms(nodes: Sequence[Node], split: Callable[[str], list[str | Term]]) -> list[Node] | None:
    """``nodes`` with their text cut around terms (inside inline elements too); None when no term was found."""
    out: list[Node] = []
    found = False
    for node in nodes:
        if isinstance(node, str):
            pieces = split(node)
            found = found or any(isinstance(p, Term) for p in pieces)
            out += pieces
        elif isinstance(node, Inline) and (children := _with_terms(node.children, split)) is not None:
            out.append(Inline(node.tag, children))
            found = True
        else:
            out.append(node)
    return out if found else None


class _Builder:
    """Walks the parsed tree once, turning it into literal HTML, start tags and units (``HtmlItem``'s parts)."""

    def __init__(self, implied: frozenset[str] = frozenset()) -> None:
        self.implied = implied  # elements the parser adds that were not written (``_implied``): their content only
        self.parts: list[str | Tag | Unit] = []
        self.slots: list[Unit | _AttrText] = []
        self.run: list[Node] = []  # the inline content since the last block boundary
        self.attributes = 0  # translated attributes so far (``AttrSlot``'s index)
        self.phrasing: dict[int, bool] = {}  # which elements are inline (``_is_inline``)

    def item(self) -> HtmlItem:
        self.flush()
        return HtmlItem(self.parts, self.slots)

    def flush(self) -> None:
        """End the current run of inline content: a unit if it has text to translate, else literal HTML."""
        if not self.run:
            return
        unit = Unit(self.run)
        self.run = []
        if unit.sentences:
            self.slots.append(unit)
        self.parts.append(unit)

    def kept(self, node: LexborNode) -> str:
        """``node`` as it came (``outer_html``), without the tags of a table's tbody or colgroup that the parser put
        in where the HTML has none (a kept table had come back with a ``<tbody>`` its translated twin did not get)."""
        html = outer_html(node)
        for name in self.implied & _IN_TABLES:
            html = html.replace(f"<{name}>", "").replace(f"</{name}>", "")
        return html

    def tag(self, node: LexborNode) -> Tag:
        """The element's tags; ``title``, ``alt``, ``placeholder`` and ``aria-label`` become translated slots."""
        name = node.tag or ""
        attrs: list[tuple[str, str | AttrSlot]] = []
        for key, value in node.attributes.items():
            text = value or ""
            if key in TRANSLATED_ATTRIBUTES and text.strip():
                self.slots.append(_AttrText(segment(text)))
                attrs.append((key, AttrSlot(self.attributes)))  # (counted: counting the slots each time was quadratic)
                self.attributes += 1
            else:
                attrs.append((key, text))
        return Tag(name, tuple(attrs), void=name in VOID)

    def children(self, node: LexborNode, depth: int) -> None:
        """The content of a block: runs of inline content and the blocks between them."""
        if depth > MAX_DEPTH:
            raise ApiError(400, f"q nests HTML elements more than {MAX_DEPTH} deep: send it with less nesting")
        for child in children(node):
            if child.is_element_node and not _is_inline(child, self.phrasing):
                self.flush()
                self.block(child, depth + 1)
            else:
                self.run.append(self.inline(child, depth + 1))

    def block(self, node: LexborNode, depth: int) -> None:
        if node.tag in KEPT_BLOCK or _translate_no(node):
            self.parts.append(self.kept(node))
            return
        if node.tag in self.implied and not node.attributes:
            self.children(node, depth)
            self.flush()
            return
        tag = self.tag(node)
        self.parts.append(tag)
        if not tag.void:
            self.children(node, depth)
            self.flush()
            self.parts.append(tag.end())

    def inline(self, node: LexborNode, depth: int) -> Node:
        """A node of a run: text, an element translated with its sentence, or an atom kept as it is."""
        if node.is_text_node:
            return node.text_content or ""
        name = node.tag or ""
        if not node.is_element_node:  # a comment (CDATA and processing instructions parse as comments)
            return Atom(comment_html(node.html or ""), silent=True)
        if depth > MAX_DEPTH:
            raise ApiError(400, f"q nests HTML elements more than {MAX_DEPTH} deep: send it with less nesting")
        if name in VOID:
            return Atom(self.tag(node) if not _translate_no(node) else self.kept(node), name in SILENT, name == "br")
        if name in KEPT_INLINE or _translate_no(node):
            return Atom(self.kept(node), silent=name in SILENT)
        text = node.text(deep=True) or ""
        if not text or _HANDLE.fullmatch(text.strip()):
            return Atom(self.kept(node))  # empty (an anchor), or a mention, hashtag or link written out
        tag = self.tag(node)
        return Inline(tag, [self.inline(child, depth + 1) for child in children(node)])


def _declare_utf8(parser: LexborHTMLParser) -> None:
    """Every ``<meta charset>`` and ``<meta http-equiv=Content-Type content>`` of the page says utf-8 (elements
    only: text in scripts, comments or other attributes is never touched)."""
    for meta in parser.css("meta"):
        attrs = meta.attrs
        if "charset" in attrs and not _is_utf8(attrs["charset"] or ""):
            attrs["charset"] = "utf-8"
        if (attrs.get("http-equiv") or "").strip().lower() == "content-type" and attrs.get("content"):
            attrs["content"] = _CHARSET.sub(_utf8_named, attrs["content"] or "")


def _is_utf8(name: str) -> bool:
    return name.strip().lower() in ("utf-8", "utf8")


def _utf8_named(match: re.Match[str]) -> str:
    """A charset or encoding declaration naming UTF-8: as written when it did, else ``utf-8``."""
    name = match.group(2)
    return match.group(0) if _is_utf8(name) else f"{match.group(1)}utf-8{match.group(3)}"


def outer_html(node: LexborNode) -> str:
    """``node`` serialised so that it parses back into the same tree (``htmlkept``); a ``<pre>``, ``<listing>`` or
    ``<textarea>`` whose content starts with a newline with the one the parser drops after its start tag written
    back (not those nested in it: rare)."""
    return _NEWLINE_DROPPED.sub(r"\1\n", kept_html(node, node.html or "", VOID), count=1)


# elements the parser puts in where the HTML leaves them out (a document's html, head and body, a table's tbody and
# colgroup); an end tag alone decides where content goes (a comment after "</body>" stays after the body)
_OPTIONAL = {name: re.compile(rf"</?{name}[\s/>]", re.I) for name in ("html", "head", "body", "tbody", "colgroup")}


_IN_TABLES = frozenset(("tbody", "colgroup"))  # the ``_OPTIONAL`` elements a kept subtree can hold


def _implied(text: str) -> frozenset[str]:
    """The ``_OPTIONAL`` elements ``text`` writes neither a start nor an end tag of: the parser adds them, and they
    come back without their tags (as sent; the parser adds them again where they were)."""
    return frozenset(name for name, written in _OPTIONAL.items() if written.search(text) is None)


def _all_text(parser: LexborHTMLParser) -> int:
    """How many characters of text a parsed fragment holds."""
    return sum(len(node.text(deep=True) or "") for node in fragment_nodes(parser))


def _fragment_parser(text: str) -> LexborHTMLParser:
    """``text`` parsed as a fragment in its context (``fragment_context``): a table part inside what holds it, unless
    that parse keeps less text than a ``<div>``'s would (a parser in a table context drops what a table cannot hold)."""
    context = fragment_context(text)
    parser = LexborHTMLParser(text, is_fragment=True, fragment_tag=context, scripting=True)
    if context != "div":
        plain = LexborHTMLParser(text, is_fragment=True, scripting=True)
        if _all_text(parser) < _all_text(plain):
            return plain
    return parser


def parse_html(text: str, *, utf8: bool = False) -> HtmlItem:
    """Parse ``text`` (a fragment, or a document when it starts with a doctype, ``<html>``, ``<head>`` or ``<body>``)
    into an ``HtmlItem``;
    ApiError 400 when it nests deeper than ``MAX_DEPTH``. ``utf8``: the result is a file written as UTF-8, so its
    ``<meta>`` charset and XML declaration say so (an ASCII page declaring windows-1252 came back as mojibake). The
    rebuilt HTML has the source's usual line end (the parser reads CRLF as LF: a CRLF file came back LF, <pre> too)."""
    item = _parsed(text, utf8)
    item.newline = line_end(text)
    return item


def _parsed(text: str, utf8: bool) -> HtmlItem:
    if text.endswith("<!"):
        # Lexbor 2.x (selectolax 1.0.2) fills the empty comment that "<!" at the very end opens with the text
        # before it, unescaped: "--&gt;&lt;img onerror=...&gt;<!" would come back as live markup. "<!-->" is the
        # same empty comment, read correctly.
        text += "-->"
    builder = _Builder(_implied(text))
    prolog = _XML_PROLOG.match(text)
    if prolog is not None and _DOCUMENT.match(text, prolog.end()):
        kept = _ENCODING.sub(_utf8_named, prolog.group()) if utf8 else prolog.group()
        builder.parts.append(kept)  # an HTML parser reads it as a comment ("<!--?xml ...?-->")
        text = text[prolog.end() :]
    if _DOCUMENT.match(text):
        # blanks before the first tag and after </body> or </html>, as written: a parser drops the first and moves the
        # others into the body (a file ending "</html>\n" came back ending "\n</body></html>")
        lead = text[: len(text) - len(text.lstrip(BLANKS))]
        body = text.rstrip(BLANKS)
        trail = text[len(body) :] if _LAST_TAG.search(body[-_LAST_TAG_LENGTH:]) else ""
        text = text[len(lead) : len(text) - len(trail)]
        builder.parts.append(lead)
        parser = LexborHTMLParser(text, scripting=True)  # as browsers that run scripts: <noscript> is raw text
        if utf8:
            _declare_utf8(parser)
        root = parser.root
        document = root.parent if root is not None else None
        doctype = _DOCTYPE.match(text)
        for node in children(document) if document is not None else []:
            if node.is_element_node:
                builder.block(node, 1)
            elif node.tag == "-doctype" and doctype is not None:  # as written: Lexbor writes <!DOCTYPE html> for any,
                builder.parts.append(doctype.group(1))  # and a page's public id decides its quirks mode
                after = text[doctype.end(1) :]
                builder.parts.append(after[: len(after) - len(after.lstrip(BLANKS))])  # its line end, as written
            else:
                builder.parts.append(outer_html(node))
        builder.flush()
        builder.parts.append(trail)
        return builder.item()
    parser = _fragment_parser(text)
    if utf8:
        _declare_utf8(parser)
    for node in fragment_nodes(parser):
        if node.is_element_node and not _is_inline(node, builder.phrasing):
            builder.flush()
            builder.block(node, 1)
        else:
            builder.run.append(builder.inline(node, 1))
    return builder.item()


__all__ = ["HtmlItem", "parse_html"]
