"""The nodes of a translatable unit (``htmlunits.Unit``): text, inline elements translated with their sentence,
atoms kept as they are, glossary terms; and HTML escaping as the serializer writes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


def escape_text(text: str) -> str:
    """Text as HTML serializes it: ``&``, ``<``, ``>`` and the no-break space escaped."""
    return text.replace("&", "&amp;").replace("\u00a0", "&nbsp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attribute(value: str) -> str:
    """An attribute value for inside double quotes."""
    return escape_text(value).replace('"', "&quot;")


@dataclass(frozen=True)
class AttrSlot:
    """A translated attribute value (``title``, ``alt``, ...): the index of its translation among the document's."""

    index: int


@dataclass(frozen=True)
class Tag:
    """An element's start and end tags; attribute values are kept as sent, or translated (``AttrSlot``)."""

    name: str
    attrs: tuple[tuple[str, str | AttrSlot], ...] = ()
    void: bool = False  # no end tag (<img>, <br>, ...)

    def start(self, values: Sequence[str]) -> str:
        """The start tag, with translated attributes taken from ``values``."""
        parts = [self.name]
        for name, value in self.attrs:
            text = values[value.index] if isinstance(value, AttrSlot) else value
            parts.append(f'{name}="{escape_attribute(text)}"')
        return "<" + " ".join(parts) + ">"

    def end(self) -> str:
        """The end tag (nothing for a void element)."""
        return "" if self.void else f"</{self.name}>"


@dataclass(eq=False)
class Atom:
    """Markup kept as it is inside a sentence: verbatim HTML, or a void element's tag (its attributes translated)."""

    markup: str | Tag
    silent: bool = False  # invisible (comment, script, <wbr>): not sent to the model
    hard_break: bool = False  # <br>: ends the sentence

    def render(self, values: Sequence[str]) -> str:
        return self.markup.start(values) if isinstance(self.markup, Tag) else self.markup


@dataclass(eq=False)
class Inline:
    """An inline element translated as part of its sentence."""

    tag: Tag
    children: list[Node] = field(default_factory=list)


@dataclass(eq=False)
class Term:
    """A glossary term found in the text: one placeholder for the model, ``target`` in the translation (the term to
    use, or the source term as found to keep it)."""

    source: str
    target: str
    glued: bool = False  # a run kept as written ("Hi👋"): spaced in the translation as in the source, not as a word


Node = Inline | Atom | Term | str
