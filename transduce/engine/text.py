"""Sentence splitting that keeps the original whitespace, so translations re-join with the same layout.

The service, ``transduce translate`` and the tests all split and re-join through ``segment`` and ``Segmented.rejoin``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# a sentence ends at . ! ? … (plus closing quotes/brackets) followed by whitespace and no lower-case letter
# ("e.g. this" stays whole, however many spaces follow "e.g."), or at a line break
_BOUNDARY = re.compile(r"(?<=[.!?…])[\"'”’»)\]]*\s+(?![a-zà-ÿ\s])|\n\s*")


@dataclass(frozen=True)
class Segmented:
    """A text cut into sentences, each with the whitespace that followed it; no sentences for a blank text.

    ``leading`` is the whitespace before the first sentence (all of a blank text), so ``rejoin`` gives back the
    text's own leading and trailing whitespace around the translations."""

    sentences: tuple[str, ...]
    separators: tuple[str, ...]  # separators[i] follows sentences[i] (the text's trailing whitespace after the last)
    leading: str = ""

    def rejoin(self, translations: Sequence[str]) -> str:
        """The translations of ``sentences``, in order, each followed by its source sentence's whitespace, after
        the source's leading whitespace."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        return self.leading + "".join(t + sep for t, sep in zip(translations, self.separators, strict=True))


def segment(text: str) -> Segmented:
    """Split ``text`` into sentences with no whitespace at either end; ``rejoin(sentences)`` gives back ``text``."""
    body = text.lstrip()
    sentences: list[str] = []
    separators: list[str] = []

    def add(piece: str, separator: str) -> None:
        sentence = piece.rstrip()  # whitespace before a line break or at the very end belongs to the separator
        sentences.append(sentence)
        separators.append(piece[len(sentence) :] + separator)

    start = 0
    for match in _BOUNDARY.finditer(body):
        sep_start = match.start()
        # keep closing quotes/brackets with the sentence, only whitespace goes to the separator
        while sep_start < match.end() and not body[sep_start].isspace():
            sep_start += 1
        if sep_start > start:
            add(body[start:sep_start], body[sep_start : match.end()])
            start = match.end()
    if start < len(body):
        add(body[start:], "")
    return Segmented(tuple(sentences), tuple(separators), text[: len(text) - len(body)])
