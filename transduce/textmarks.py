"""Line breaks, a text's usual line end, and the invisible marks that go at a text's edges (bidirectional marks,
embeddings and isolates, zero-width space, word joiner, byte order mark): sentence splitting keeps those marks with
the whitespace around the sentences, and the tokenizer's unknown runs leave them out at a line's edge, so a kept run
does not carry one too (it came back twice). A module of its own: the tokenizer, which the model's checkpoints use,
may not reach the engine."""

EDGE_MARKS = "\u200b\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff"
# a sentence ends at a line break: any of str.splitlines()'s (a lone \r as old Mac files have, \v, \f, the
# file/group/record separators, NEL, U+2028, U+2029), not only \n
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def line_end(text: str) -> str:
    """The line end most of ``text``'s lines have: CRLF, LF, or a lone CR (classic Mac OS, which CommonMark reads as a
    line end too); a file rebuilt from a parse that reads every one as LF (Markdown's rows, the HTML parser) gets it
    back on every line (one CRLF among LF lines made them all CRLF)."""
    crlf = text.count("\r\n")
    counts = {"\r\n": crlf, "\n": text.count("\n") - crlf, "\r": text.count("\r") - crlf}
    return max(counts, key=lambda end: counts[end]) if any(counts.values()) else "\n"
