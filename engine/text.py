"""Sentence splitting that keeps the original whitespace so translations re-join with the same layout."""

from __future__ import annotations

import re

# a sentence ends at . ! ? … (plus closing quotes/brackets) followed by whitespace and no lower-case letter
# ("e.g. this" stays whole), or at a line break
_BOUNDARY = re.compile(r"(?<=[.!?…])[\"'”’»)\]]*\s+(?![a-zà-ÿ])|\n\s*")


def split_sentences(text: str) -> list[tuple[str, str]]:
    """Split ``text`` into (sentence, following whitespace) pairs; ''.join(s + ws) == text.lstrip()."""
    text = text.lstrip()
    pieces: list[tuple[str, str]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.start()
        sep_start = end
        # keep closing quotes/brackets with the sentence, only whitespace goes to the separator
        while sep_start < match.end() and not text[sep_start].isspace():
            sep_start += 1
        if sep_start > start:
            pieces.append((text[start:sep_start], text[sep_start : match.end()]))
            start = match.end()
    if start < len(text):
        pieces.append((text[start:], ""))
    return pieces


def join_sentences(translated: list[str], separators: list[str]) -> str:
    """Re-join translated sentences with the whitespace that followed each source sentence."""
    return "".join(t + sep for t, sep in zip(translated, separators, strict=True))
