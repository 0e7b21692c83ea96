"""Markdown for POST /translate_file: a file read into rows of kept text and translatable texts (``MarkdownText``).

Fenced and indented code, HTML blocks, front matter, link definitions and rules are never translated; headings, list
items, quotes and table cells keep their markers. A paragraph's soft-wrapped lines are translated as one text and
wrapped again to about the width they had (hard breaks kept). Inside a text, code spans, URLs, autolinks, images, raw
HTML and link destinations never reach the model: they travel as the numbered placeholders of ``htmlunits.Unit`` (a
link's text is translated, its ``](url)`` kept; an inline HTML element's text too, its tags paired around it by
``_html_elements``), so a lost or moved placeholder is put back as in ``format: "html"``.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from transduce.service.htmldoc import KEPT_INLINE, VOID
from transduce.service.htmlnodes import Atom, Inline, Node, Tag
from transduce.service.htmlunits import Unit

# what front matter's first line after any comments may be: a key (YAML "key: value"; TOML "key = value" or a table)
_KEYS = {"---": re.compile(r"\s*[^\s:#][^:]*:(?:\s|$)"), "+++": re.compile(r"\s*(?:\[|[^\s=#][^=]*=)")}
_FRONT_MATTER: dict[str, tuple[str, ...]] = {
    "---": ("---", "..."),
    "+++": ("+++",),
}  # a first line that opens front matter: what closes it
_QUOTE = re.compile(r"(?: {0,3}>[ \t]?)*")
_FENCE = re.compile(r"\s*(`{3,}|~{3,})")
_THEMATIC = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*$")
_ATX = re.compile(r" {0,3}#{1,6}[ \t]+")  # an ATX heading's marker (its text and closing: _heading)
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)(?:\[[ xX]\][ \t]+)?")
_LINK_DEF = re.compile(r" {0,3}\[[^\]]+\]:[ \t]*\S")
_TABLE_RULE = re.compile(r" {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_BLOCK_TAGS = (
    "address|article|aside|base|basefont|blockquote|body|caption|center|col|colgroup|dd|details|dialog|dir|div|dl|dt|"
    "fieldset|figcaption|figure|footer|form|frame|frameset|h[1-6]|head|header|hr|html|iframe|legend|li|link|main|menu|"
    "menuitem|nav|noframes|ol|optgroup|option|p|param|search|section|summary|table|tbody|td|tfoot|th|thead|title|tr|"
    "track|ul"
)
_HTML_BLOCK = re.compile(
    rf" {{0,3}}(?:<(?:script|pre|style|textarea)(?:[\s>]|$)|<!--|<\?|<![A-Za-z]|</?(?:{_BLOCK_TAGS})(?:[\s>]|/>|$))",
    re.IGNORECASE,
)
_HTML_LINE = re.compile(r" {0,3}(?:<[A-Za-z][\w-]*(?:\s[^<>]*)?/?>|</[A-Za-z][\w-]*\s*>)\s*$")  # not in a paragraph
_HTML_ENDS = {"<script": "</script>", "<pre": "</pre>", "<style": "</style>", "<textarea": "</textarea>"}
_HTML_ENDS |= {"<!--": "-->", "<?": "?>", "<![cdata[": "]]>", "<!": ">"}  # how an HTML block ends (else: a blank line)
# inline pieces that never reach the model: escapes (text, except \|), hard breaks, code spans, autolinks, HTML,
# images, footnote references (no "[" in the label, as CommonMark: with one, "[^" * k was searched to its end from
# every "[^"), bare URLs (a code span or comment only opens here: _kept_spans finds where it closes)
_KEPT = re.compile(
    r"(?P<esc>\\[!-/:-@\[-`{-~])|\n|(?<!`)(?P<ticks>`+)"
    r"|<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*>|<[\w.+-]+@[\w-]+(?:\.[\w-]+)+>|(?P<comment><!--)"
    r"|</?[A-Za-z][A-Za-z0-9-]*(?:\s+[A-Za-z_:][\w.:-]*(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'=<>`]+))?)*\s*/?>"
    r"|!\[(?:[^\[\]\\]|\\.)*\](?:\((?:<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
    r"|\[[^\[\]]*\])|\[\^[^\[\]\s]+\]|(?:https?://|www\.)[^\s<>]*[^\s<>.,;:!?'\")\]*_~]",
    re.DOTALL,
)
_LINK = re.compile(
    r"(?<![\\!])\[(?P<text>(?:[^\[\]\\]|\\.|\[(?:[^\[\]\\]|\\.)*\])*)\]"
    r"(?:\((?:<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
    r"|\[[^\[\]]*\])"
)
_START_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?/?>")  # an inline HTML piece of _KEPT's, paired
_END_TAG = re.compile(r"</([A-Za-z][A-Za-z0-9-]*)\s*>")  # by _html_elements
MAX_INLINE_DEPTH = 32  # HTML elements nested deeper in a Markdown text stay tags of their own (no deep recursion)
_MASK = "\ue000"  # stands for a kept piece while links are looked for, so none is found inside one
_SENTINEL = re.compile(r"(</?[klbh]\d+>)|&(amp|lt|gt|nbsp);")  # Unit.render's markup for our pieces, its escapes
_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "nbsp": "\u00a0"}
_STARTS_BLOCK = re.compile(r"(?:[-+*]|#{1,6}|\d{1,9}[.)]|=+|-+)(?:\s|$)|>|`{3}|~{3}|\|")  # at a line's start


def _kept_spans(text: str) -> list[tuple[int, int]]:
    """Where ``_KEPT``'s pieces are, left to right (escapes other than ``\\|`` left out). A code span (a run of N
    backticks up to the next run of exactly N) and a comment (up to the next ``-->``) are closed by looking the closing
    up, never by scanning the rest of the text again for each opening: the time grows with the text's length."""
    runs: dict[int, list[int]] = {}  # backtick runs by length: where each starts
    for run in re.finditer("`+", text):
        runs.setdefault(run.end() - run.start(), []).append(run.start())
    spans: list[tuple[int, int]] = []
    at, closing = 0, 0  # where to look on; the next "-->" (-1: none left)
    while (found := _KEPT.search(text, at)) is not None:
        start, end = found.span()
        if found.group("ticks"):
            same = runs[end - start]
            k = bisect_right(same, start)
            if k == len(same):  # never closed: the backticks are text
                at = end
                continue
            end = same[k] + end - start
        elif found.group("comment"):
            if 0 <= closing < end:
                closing = text.find("-->", end)
            if closing < 0:  # never closed: text
                at = start + 1
                continue
            end = closing + 3
        if not found.group("esc") or found.group() == "\\|":
            spans.append((start, end))
        at = end
    return spans


def _html_elements(
    text: str, atoms: list[tuple[int, int]], breaks: list[int]
) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]]]:
    """The inline HTML of a text, its start and end tags (kept pieces among ``atoms``, in order) paired as the
    elements they open and close: (start tag's start and end, end tag's start and end) for an element whose text is
    translated with its sentence (``<b>bold</b>``: the tags go back around its translation, never crossed), and
    (start, end), outermost only, for one never translated (``KEPT_INLINE``: ``<code>ls</code>`` is kept whole, as
    in HTML), but for one holding a hard break (at a position of ``breaks``, sorted), whose break must stay as
    written. A tag left unpaired (a void element, ``<br/>``, a start tag never closed, an end tag never opened, one
    nested over ``MAX_INLINE_DEPTH`` deep) stays a piece of its own. Linear in the tags (a file may hold thousands)."""
    open_tags: list[tuple[str, int, int]] = []
    elements: list[tuple[int, int, int, int]] = []
    whole: list[tuple[int, int]] = []
    for start, end in atoms:
        piece = text[start:end]
        if (tag := _START_TAG.fullmatch(piece)) is not None and not piece.endswith("/>"):
            if tag[1].lower() not in VOID and len(open_tags) < MAX_INLINE_DEPTH:
                open_tags.append((tag[1].lower(), start, end))
        elif (tag := _END_TAG.fullmatch(piece)) is not None and any(n == tag[1].lower() for n, _, _ in open_tags):
            while open_tags[-1][0] != tag[1].lower():  # what opened inside it and never closed: pieces of their own
                open_tags.pop()
            name, opened, after = open_tags.pop()
            if name not in KEPT_INLINE:
                elements.append((opened, after, start, end))
            elif not _covers(breaks, opened, end):
                whole.append((opened, end))
    whole.sort()  # they nest, never cross (one stack): the outermost, then the elements outside them
    outermost: list[tuple[int, int]] = []
    for span in whole:
        if not outermost or span[0] >= outermost[-1][1]:
            outermost.append(span)
    return [e for e in elements if not _within(outermost, e[0], e[3])], outermost


def _covers(points: list[int], start: int, end: int) -> bool:
    """Whether a position of ``points`` (sorted) lies in [start, end)."""
    k = bisect_left(points, start)
    return k < len(points) and points[k] < end


def _within(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) lies inside one of ``spans`` (sorted, none overlapping)."""
    k = bisect_right(spans, (start, math.inf)) - 1
    return k >= 0 and spans[k][0] <= start and end <= spans[k][1]


def _crosses_no_link(element: tuple[int, int, int, int], links: list[tuple[int, int, int, int]]) -> bool:
    """Whether an HTML element and the links (start, text start, text end, end; sorted, none overlapping; a link
    kept whole has no text: -1, -1) nest: each link it meets lies in the element's text, or the element in a
    translated link's text."""
    s, ts, te, e = element
    i = bisect_right(links, s, key=lambda link: link[3])  # the first link ending after the element's start
    j = bisect_left(links, e, key=lambda link: link[0])  # the links starting before its end: [i, j)
    if i >= j:
        return True
    ls, lts, lte, le = links[i]
    if i == j - 1 and ls <= s and e <= le:  # the element inside one link: in its text
        return lts <= s and e <= lte
    return ts <= ls and links[j - 1][3] <= te  # the links inside the element's text


def _heading(line: str) -> tuple[str, str, str] | None:
    """An ATX heading's marker, text, and closing #s with the trailing whitespace; None when it is not one."""
    marker = _ATX.match(line)
    if marker is None:
        return None
    body = line[marker.end() :]
    text = body.rstrip(" \t")
    bare = text.rstrip("#")
    if bare != text and bare[-1:] in (" ", "\t"):  # a closing sequence: #s after a space
        text = bare.rstrip(" \t")
    return marker.group(), text, body[len(text) :]


def unescape(text: str, kept: dict[str, str]) -> str:
    """``Unit.render`` output as Markdown: our pieces back in place of their tags, the text's escapes undone."""
    return _SENTINEL.sub(lambda m: kept[m.group(1)] if m.group(1) else _ENTITIES[m.group(2)], text)


def _escape_start(line: str) -> str:
    """A line that would open a block (list item, heading, quote...) where it stands: its marker escaped."""
    if not _STARTS_BLOCK.match(line):
        return line
    digits = len(line) - len(line.lstrip("0123456789"))
    return line[:digits] + "\\" + line[digits:]


class MarkdownText:
    """One Markdown paragraph, heading or table cell: a ``Unit`` whose kept pieces are numbered tags, rendered back
    to Markdown (wrapped to ``width`` when it was wrapped; never inside a kept piece, never before a block marker).

    ``kind``: ``para`` (a paragraph or list item: a block marker at its start is escaped), ``heading`` or ``cell``
    (a table cell: its pipes are escaped)."""

    def __init__(
        self, text: str, breaks: dict[int, str], first: str = "", rest: str = "", width: int = 0, kind: str = "para"
    ) -> None:
        self.kept: dict[str, str] = {}
        self.first, self.rest, self.width, self.kind = first, rest, width, kind
        atoms = _kept_spans(text)
        elements, whole = _html_elements(text, atoms, sorted(breaks))
        if whole:  # an element kept whole (<code>ls</code>) is one piece: nothing inside it is looked at
            atoms = [a for a in atoms if not _within(whole, *a)] + whole
        chars = list(text)
        for start, end in atoms:
            chars[start:end] = _MASK * (end - start)
        links, every_link = [], []  # translated ones; and those kept whole too (no text: -1, -1)
        for m in _LINK.finditer("".join(chars)):
            if any(c.isalpha() for c in m.group("text")):
                links.append((m.start(), m.start("text"), m.end("text"), m.end()))
                every_link.append(links[-1])
            else:  # nothing to translate in it ([1](#note), a URL as its own text): kept whole
                atoms.append((m.start(), m.end()))
                every_link.append((m.start(), -1, -1, m.end()))
        # inline elements, translated with their sentence: links, and HTML elements that cross no link
        self.inline = {s: (ts, te) for s, ts, te, _ in links}
        spans = [(s, e) for s, _, _, e in links]
        tags: set[tuple[int, int]] = set()
        for s, ts, te, e in elements:
            if _crosses_no_link((s, ts, te, e), every_link):
                self.inline[s] = (ts, te)
                spans.append((s, e))
                tags.update(((s, ts), (te, e)))  # its tags are the element's now
        atoms = [a for a in atoms if a not in tags]
        self.text, self.breaks = text, breaks
        self.unit = Unit(self._nodes(0, len(text), sorted(atoms + spans, key=lambda span: (span[0], -span[1]))))

    def _tag(self, kind: str, piece: str, closing: str | None = None) -> str:
        name = f"{kind}{len(self.kept)}"
        self.kept[f"<{name}>"] = piece
        if closing is not None:
            self.kept[f"</{name}>"] = closing
        return name

    def _nodes(self, lo: int, hi: int, spans: list[tuple[int, int]]) -> list[Node]:
        """The text from ``lo`` to ``hi`` around ``spans`` (those within it, by start, the longest first): kept
        pieces (atoms), and links and HTML elements (inline elements, with what they hold)."""
        text, nodes, at = self.text, list[Node](), lo
        for k, (start, end) in enumerate(spans):
            if start < at:  # inside the span before: part of its element, or of nothing translated
                continue
            if start > at:
                nodes.append(text[at:start])
            inner = self.inline.get(start)
            if inner is None and start in self.breaks:
                nodes.append(Atom(f"<{self._tag('b', self.breaks[start])}>", hard_break=True))
            elif inner is None:
                nodes.append(Atom(f"<{self._tag('k', text[start:end].replace(chr(10), ' '))}>"))
            else:
                ts, te = inner
                kind = "l" if text[start] == "[" else "h"
                name = self._tag(kind, text[start:ts].replace("\n", " "), text[te:end].replace("\n", " "))
                inside = spans[k + 1 : bisect_left(spans, te, lo=k + 1, key=lambda span: span[0])]
                nodes.append(Inline(Tag(name), self._nodes(ts, te, inside)))
            at = end
        if at < hi:
            nodes.append(text[at:hi])
        return nodes

    def render(self, translations: Sequence[str]) -> str:
        parts = re.split(r"(<b\d+>)", self.unit.render(translations, ()))
        lines: list[str] = []
        for k in range(0, len(parts), 2):
            chunk = re.sub(r"(?<!\\)\|", r"\\|", parts[k]) if self.kind == "cell" else parts[k]
            words = [unescape(word, self.kept) for word in chunk.split(" ") if word]
            rows: list[list[str]] = []  # the words of each line
            size = 0  # the last line's length
            for word in words:  # a word that would open a block at a line's start stays on the line before
                fits = rows and len(self.rest) + size + 1 + len(word) <= self.width
                if rows and (not self.width or fits or _STARTS_BLOCK.match(word) or word.startswith("<")):
                    rows[-1].append(word)
                    size += 1 + len(word)
                else:
                    rows.append([word])
                    size = len(word)
            wrapped = [" ".join(row) for row in rows] or [""]
            if self.kind == "para":
                wrapped[0] = _escape_start(wrapped[0])
            if k:
                lines[-1] += self.kept[parts[k - 1]]  # the hard break, as it was written
            lines += wrapped
        return self.first + ("\n" + self.rest).join(lines)


class Markdown:
    """Reads Markdown line by line into rows of literal text and ``MarkdownText`` blocks (CommonMark's block
    structure, as far as translation needs it)."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.rows: list[list[str | MarkdownText]] = []
        self.para: list[str] = []  # the open paragraph's lines, without their prefixes
        self.raw: list[str] = []
        self.prefixes = ("", "")  # the open paragraph's first-line and continuation prefixes
        self.list_indent = 0

    def flush(self, wrap: bool = True) -> None:
        if not self.para:
            return
        text, breaks = "", {}
        for k, line in enumerate(self.para):
            body = line.strip()
            last = k == len(self.para) - 1
            if not last and (line.rstrip().endswith("\\") or line.endswith("  ")):
                marker = "\\" if line.rstrip().endswith("\\") else "  "
                breaks[len(text) + len(body.removesuffix(marker.strip()))] = marker
                text += body.removesuffix(marker.strip()) + "\n"
            else:
                text += body + ("" if last else " ")
        width = max(map(len, self.raw)) if wrap and len(self.raw) > 1 else 0
        self.rows.append([MarkdownText(text, breaks, *self.prefixes, width=width)])
        self.para, self.raw = [], []

    def literal(self, line: str) -> None:
        self.flush()
        self.rows.append([line])

    def read(self) -> list[list[str | MarkdownText]]:
        lines, i, fence, html = self.lines, 0, "", None
        # front matter: YAML (--- or ... closes it) or TOML, opening with a key or a comment (a thematic break "---"
        # before a paragraph is none)
        opener = lines[0].rstrip()
        key, k = _KEYS.get(opener), 1
        while k < len(lines) and (lines[k].lstrip().startswith("#") or (opener == "+++" and not lines[k].strip())):
            k += 1  # (comments; a "---" and a blank line open a thematic break, a "---" and "# Title" a heading)
        closing = _FRONT_MATTER[opener] if key is not None and k < len(lines) and key.match(lines[k]) else ()
        matter = next((k for k in range(1, len(lines)) if lines[k].rstrip() in closing), 0)
        if matter:
            i = matter + 1
            self.rows += [[line] for line in lines[:i]]
        while i < len(lines):
            line, i = lines[i], i + 1
            found = _QUOTE.match(line)
            quote = found.group() if found else ""
            rest = line[len(quote) :]
            if fence or html is not None:
                self.rows.append([line])
                if fence and re.fullmatch(rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*", rest):
                    fence = ""
                elif html is not None and ((html and html in rest.lower()) or (not html and not rest.strip())):
                    html = None
                continue
            indent = len(rest.expandtabs(4)) - len(rest.expandtabs(4).lstrip())
            if self.para and quote.count(">") > self.prefixes[1].count(">"):
                self.flush()  # a deeper quote starts a block of its own
            if rest.strip() and not self.para and indent < self.list_indent:
                self.list_indent = 0  # the list ended
            fenced, heading, item = _FENCE.match(rest), _heading(rest), _LIST_ITEM.match(rest)
            if not rest.strip():
                self.literal(line)
            elif fenced:
                self.literal(line)
                fence = fenced.group(1)
            elif self.para and _SETEXT.match(rest):
                self.flush(wrap=False)  # a setext heading's text stays on one line
                self.rows.append([line])
            elif _THEMATIC.match(rest) or (not self.para and _LINK_DEF.match(rest)):
                self.literal(line)
            elif _HTML_BLOCK.match(rest) or (not self.para and _HTML_LINE.match(rest)):
                self.literal(line)
                low = rest.lower().lstrip()
                end = next((e for s, e in _HTML_ENDS.items() if low.startswith(s)), "")
                html = None if end and end in low[2:] else end
            elif heading and heading[1].strip():
                self.flush()
                self.rows.append([quote + heading[0], MarkdownText(heading[1], {}, kind="heading"), heading[2]])
            elif "|" in rest and i < len(lines) and "|" in lines[i] and _TABLE_RULE.match(lines[i][len(quote) :]):
                self.flush()
                self.rows += [self.row(quote, rest), [lines[i]]]
                i += 1
                while i < len(lines) and "|" in lines[i] and lines[i].strip():
                    self.rows.append(self.row(quote, lines[i][len(quote) :]))
                    i += 1
            elif not self.para and indent >= self.list_indent + 4:
                self.literal(line)  # indented code
            elif item and rest[item.end() :].strip():
                self.flush()
                prefix = item.group()
                self.list_indent = len(prefix.expandtabs(4))
                self.para, self.raw = [rest[item.end() :]], [line]
                self.prefixes = (quote + prefix, quote + " " * len(prefix.expandtabs(4)))
            elif item:
                self.literal(line)
            elif self.para:
                self.para.append(rest)
                self.raw.append(line)
            else:
                lead = rest[: len(rest) - len(rest.lstrip())]
                self.para, self.raw, self.prefixes = [rest], [line], (quote + lead, quote + lead)
        self.flush()
        return self.rows

    @staticmethod
    def row(quote: str, rest: str) -> list[str | MarkdownText]:
        """A table row: its cells translated one by one, the pipes and padding kept."""
        row: list[str | MarkdownText] = [quote]
        for k, cell in enumerate(re.split(r"(?<!\\)\|", rest)):
            body = cell.strip()
            lead, trail = cell[: len(cell) - len(cell.lstrip())], cell[len(cell.rstrip()) :]
            row += ["|" if k else "", lead, MarkdownText(body, {}, kind="cell") if body else "", trail]
        return row
