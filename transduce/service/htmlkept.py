"""Markup sent back as it came (code, SVG, MathML, scripts, ``translate="no"``, ...), serialised so that it parses
back into the same tree.

Lexbor's serialiser writes the text of every ``style``, ``script``, ``xmp``, ``iframe``, ``noembed``, ``noframes``,
``plaintext`` and ``noscript`` element unescaped, as the HTML Standard says for those HTML elements, but also for the
SVG and MathML elements of those names, whose text the parser had read with its entities decoded:
``<svg><style>&lt;/style&gt;&lt;img src=x onerror=alert(1)&gt;</style></svg>`` came back with a live ``<img>``
(mutation XSS; so did markup the parser had moved, as in ``<math><mtext><table><mglyph><style>``, and a template's
content, which the check did not see at first). A kept subtree that holds such an element, a template, an mglyph
or a malignmark is parsed again as serialised (template contents compared too); if the tree differs, it is written
out here instead, with every text escaped: what it held as text stays text; should even that parse back otherwise,
the markup comes back as text. Every parse reads as browsers that run scripts do (``<noscript>`` is raw text: read
as markup, its content came back repaired, live).
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

from transduce.service.htmlnodes import escape_attribute, escape_text

RAW_TEXT = frozenset(("style", "script", "xmp", "iframe", "noembed", "noframes", "plaintext", "noscript"))
# and what the parser reads otherwise out of its context: a template's inert content, MathML's mglyph and malignmark,
# HTML elements or MathML ones depending on where they stand
_CHECKED = RAW_TEXT | {"template", "mglyph", "malignmark"}
_CHECKED_SELECTOR = ", ".join(sorted(_CHECKED))
_END_TAGS = re.compile(r"(?:</[A-Za-z][^>]*>)+")
# the element a fragment that starts with a table part is parsed inside, as a browser parses a table's innerHTML: in
# a <div> the parser drops table parts, so "<td>Hello</td><td>World</td>" lost its tags and ran its cells together
CONTEXT = {
    "td": "tr",
    "th": "tr",
    "tr": "tbody",
    **dict.fromkeys(("tbody", "thead", "tfoot", "caption", "colgroup"), "table"),
    "col": "table",  # in a <colgroup> the parser drops everything but <col>s
}
# a comment as the tokenizer ends one ("<!-->" and "<!--->" too, "--!>" as "-->"), atomic: a run of comments matches
# in linear time (with backtracking into ".*?", 30 empty comments took minutes); blanks as HTML's five
COMMENT = r"(?><!--(?:>|->|.*?--!?>))"
BLANKS = "\t\n\f\r "  # HTML's whitespace (not Python's, nor the no-break space)
BLANK = r"[\t\n\f\r ]"
LEADING = rf"(?>{BLANK}*(?:{COMMENT}{BLANK}*)*)"  # blanks and comments before a document's first tag
_FIRST_TAG = re.compile(rf"{LEADING}<([A-Za-z][A-Za-z0-9]*)", re.DOTALL)


def fragment_context(html: str) -> str:
    """The element to parse the fragment ``html`` inside: where it starts (after blanks and comments) with a table
    part, the element that holds that part (``CONTEXT``), else a ``<div>``."""
    first = _FIRST_TAG.match(html)
    return CONTEXT.get(first.group(1).lower(), "div") if first is not None else "div"


def children(node: LexborNode) -> list[LexborNode]:
    """``node``'s child nodes, in order."""
    out, child = [], node.child
    while child is not None:
        out.append(child)
        child = child.next
    return out


def fragment_nodes(parser: LexborHTMLParser) -> list[LexborNode]:
    """A fragment's top-level nodes. (Lexbor's ``root`` of a fragment serializes the whole fragment as its ``html``,
    so the first node is taken again through its sibling where it has one.)"""
    nodes, node = [], parser.root
    while node is not None:
        nodes.append(node)
        node = node.next
    if len(nodes) > 1 and nodes[1].prev is not None:
        nodes[0] = nodes[1].prev
    return nodes


def kept_html(node: LexborNode, serialised: str, void: frozenset[str]) -> str:
    """``serialised`` (Lexbor's ``node.html``), or, where it would parse back into another tree, ``node`` written with
    every text escaped (``void``: the element names without an end tag); should even that parse back into another
    tree, the markup is given back as text."""
    if not node.is_element_node:
        return serialised
    if node.tag not in _CHECKED and node.css_first(_CHECKED_SELECTOR) is None:
        return serialised  # no text the serialiser writes unescaped, nothing the parser reads otherwise in context
    if _parses_back(node, serialised):
        return serialised
    escaped = _escaped(node, void)
    return escaped if _parses_back(node, escaped) else escape_text(serialised)


def _parses_back(node: LexborNode, html: str) -> bool:
    """Whether ``html``, parsed as a fragment (as browsers that run scripts parse), is ``node``'s tree."""
    context = CONTEXT.get(node.tag or "", "div")  # a table part parses back only inside its table
    again = fragment_nodes(LexborHTMLParser(html, is_fragment=True, fragment_tag=context, scripting=True))
    return len(again) == 1 and _same_tree(node, again[0])


def _content(node: LexborNode) -> list[LexborNode]:
    """``node``'s child nodes; a ``<template>``'s are its content (a fragment of its own, which ``css`` never
    reaches)."""
    if node.tag == "template" and node.child is None:
        fragments = node.template_fragments()
        return children(fragments[0]) if fragments else []
    return children(node)


def _same_tree(a: LexborNode, b: LexborNode) -> bool:
    """Equal node kinds, names, attributes and texts all the way down, template contents included."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if (x.is_element_node, x.is_text_node, x.tag) != (y.is_element_node, y.is_text_node, y.tag):
            return False
        if x.is_element_node and x.attributes != y.attributes:
            return False
        if not x.is_element_node and (x.text_content if x.is_text_node else x.html) != (
            y.text_content if y.is_text_node else y.html
        ):
            return False
        xs, ys = _content(x), _content(y)
        if len(xs) != len(ys):
            return False
        if x.tag == "plaintext" and _plaintext_read_back(xs, ys):
            continue
        stack.extend(zip(xs, ys, strict=True))
    return True


def _plaintext_read_back(xs: list[LexborNode], ys: list[LexborNode]) -> bool:
    """A ``<plaintext>``'s text read back: everything after its start tag is text, so the end tags written after it
    (its own, its ancestors') come back as text at its end. Text all the same; not markup."""
    if len(xs) != 1 or not xs[0].is_text_node or not ys[0].is_text_node:
        return False
    sent, back = xs[0].text_content or "", ys[0].text_content or ""
    return back.startswith(sent) and _END_TAGS.fullmatch(back[len(sent) :]) is not None


def _escaped(node: LexborNode, void: frozenset[str]) -> str:
    """``node`` serialised with every text escaped, template contents included."""
    out: list[str] = []
    stack: list[LexborNode | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)  # an end tag
        elif item.is_text_node:
            out.append(escape_text(item.text_content or ""))
        elif not item.is_element_node:
            out.append(comment_html(item.html or ""))
        else:
            name = item.tag or ""
            attrs = "".join(
                f' {key}="{escape_attribute(value)}"' if value is not None else f" {key}"
                for key, value in item.attributes.items()
            )
            out.append(f"<{name}{attrs}>")
            if name not in void:
                stack.append(f"</{name}>")
                stack.extend(reversed(_content(item)))
    return "".join(out)


def comment_html(html: str) -> str:
    """A comment as serialized, with ``<`` and ``>`` in its text escaped if they could end it early (the parser never
    makes such a comment, but a comment is the one place the serializer writes text unescaped)."""
    inner = html[4:-3] if html.startswith("<!--") and html.endswith("-->") else html
    if "--" in inner or inner.startswith((">", "->")) or inner.endswith("<!-") or not html.startswith("<!--"):
        inner = inner.replace("<", "&lt;").replace(">", "&gt;")
    return f"<!--{inner}-->"
