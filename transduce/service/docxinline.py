"""What a .docx paragraph holds inline, in document order (``docxruns`` makes a ``Unit`` of it): its runs; the
elements around runs whose text is translated with its sentence and put back inside them (a hyperlink, an inline
content control, a smart tag, custom XML, a tracked insertion or move, a bidirectional embedding); and those kept as
they are, in their place (a tracked deletion, a simple field, a content control Word fills). Bookmarks, comment
ranges and proofing marks hold no text and are not read."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
P, R, HYPERLINK, SDT = f"{W}p", f"{W}r", f"{W}hyperlink", f"{W}sdt"
RUN_TEXT = tuple(f"{W}{tag}" for tag in ("br", "cr", "noBreakHyphen", "ptab", "t", "tab"))  # python-docx's CT_R.text
_T = f"{W}t"
SHOWN = (_T, f"{W}noBreakHyphen")  # where a run's text can be other than blank
INSERTED = (f"{W}ins", f"{W}moveTo")  # tracked changes whose text is the paragraph's
_DELETED = (f"{W}del", f"{W}moveFrom")  # tracked changes whose text is not (w:delText, never read)
_AROUND = (HYPERLINK, SDT, f"{W}smartTag", f"{W}customXml", f"{W}dir", f"{W}bdo", *INSERTED)
_CHANGES = (*INSERTED, *_DELETED)
_KEPT = (*_DELETED, f"{W}fldSimple")  # (a simple field's result is Word's to fill, as a complex field's is)
_INLINE = (R, *_AROUND, *_KEPT)
_W14 = "{http://schemas.microsoft.com/office/word/2010/wordml}"
# a control Word fills from data, one showing its placeholder, a check box (its symbol is its state)
_FILLED = (f"{W}dataBinding", f"{W}showingPlcHdr", f"{_W14}checkbox")
_GENERATED = ("table of contents", "bibliograph")  # building blocks (w:docPartGallery) Word fills from fields
_SPACE = re.compile(r"\s")


def run_text(run: Any) -> str:
    """A run's (CT_R) text as python-docx reads it (tabs and line breaks as characters), in one pass."""
    return "".join(str(e) for e in run.iterchildren(*RUN_TEXT))


def filled_control(sdt: Any) -> bool:
    """Whether a content control (w:sdt, of a block or inside a paragraph) is one Word fills: a table of contents or
    bibliography (field results: as text, their page numbers would be the model's), one bound to data (filled again
    from it), one showing its placeholder text, a check box."""
    properties = sdt.find(f"{W}sdtPr")
    if properties is None:
        return False
    gallery = properties.find(f"{W}docPartObj/{W}docPartGallery")
    kind = (gallery.get(f"{W}val") or "").lower() if gallery is not None else ""
    return any(properties.find(t) is not None for t in _FILLED) or any(g in kind for g in _GENERATED)


def _content(element: Any) -> Any:
    """Where the runs of an element around runs are: a content control's w:sdtContent (None: it has none, or Word
    fills it), the element itself for the others."""
    if element.tag != SDT:
        return element
    return None if filled_control(element) else element.find(f"{W}sdtContent")


def read_runs(holder: Any) -> Iterator[Any]:
    """The runs whose text a paragraph (or an element inside it) shows, in document order: its own and those of the
    elements around runs, not those kept as they are."""
    for child in holder.iterchildren(R, *_AROUND):
        if child.tag == R:
            yield child
        elif (content := _content(child)) is not None:
            yield from read_runs(content)


def paragraph_text(paragraph: Any) -> str:
    """A paragraph's text as it is read for translation (``read_runs``)."""
    return "".join(run_text(run) for run in read_runs(paragraph))


@dataclass
class Piece:
    """One step through a paragraph: a run (``kind`` "run", with its ``text``), the start or the end of an element
    around runs ("open", with ``holder``, where its runs are; "close"), or an element "kept" as it is."""

    kind: str
    element: Any
    text: str = ""
    holder: Any = None


def pieces(paragraph: Any) -> list[Piece]:
    """``paragraph``'s content as ``Piece``s. An element around runs with no text is kept whole (an empty hyperlink,
    a control holding a picture). A tracked change inside a word is no piece of its own, so the model gets the word
    whole ("colo<ins>u</ins>r" was sent as "colo [1] u [2] r"): an insertion that is a piece of one word (no space in
    it, an end of it inside a word) has its runs read as the runs around it are (its text stays in the sentence, its
    mark is lost), and a deletion stays among the runs around it, after their text. An insertion holding a space
    keeps its mark, even with an end inside a word ("Sec<ins>ond one. Thi</ins>rd": its mark had been lost, and
    rejecting the changes no longer removed it)."""
    out: list[Piece] = []
    _walk(paragraph, out)
    out = _kept_when_empty(out)
    before, after = _neighbours(out)
    read, at = "".join(piece.text for piece in out), [0]  # the text read, and where each piece's starts in it
    for piece in out:
        at.append(at[-1] + len(piece.text))
    glued: set[int] = set()  # the pieces of tracked changes inside a word, dropped
    opened: list[int] = []
    for i, piece in enumerate(out):
        if piece.kind == "open":
            opened.append(i)
        elif piece.kind == "close":
            start = opened.pop()
            inside = (_wordy(before[start]) and _wordy(after[start])) or (_wordy(before[i]) and _wordy(after[i]))
            if piece.element.tag in INSERTED and inside and not _SPACE.search(read, at[start], at[i]):
                glued.update((start, i))
        elif piece.kind == "kept" and _wordy(before[i]) and _wordy(after[i]) and _unseen_change(piece.element):
            glued.add(i)
    return [piece for i, piece in enumerate(out) if i not in glued]


def _walk(holder: Any, out: list[Piece]) -> None:
    """``holder``'s runs and the elements inside it as pieces, in document order, into ``out``."""
    for child in holder.iterchildren(*_INLINE):
        if child.tag == R:
            out.append(Piece("run", child, run_text(child)))
        elif child.tag in _KEPT or (content := _content(child)) is None:
            out.append(Piece("kept", child))
        else:
            out.append(Piece("open", child, holder=content))
            _walk(content, out)
            out.append(Piece("close", child))


def _kept_when_empty(found: list[Piece]) -> list[Piece]:
    """``found`` with each element around runs whose runs have no text (blank) as one kept piece."""
    out: list[Piece] = []
    opened: list[tuple[int, bool]] = []  # each open element: where it is in ``out``, whether it has text so far
    for piece in found:
        if piece.kind == "open":
            opened.append((len(out), False))
        elif piece.kind == "close":
            start, text = opened.pop()
            if not text:
                del out[start:]
                piece = Piece("kept", piece.element)
            elif opened:
                opened[-1] = (opened[-1][0], True)
        elif piece.kind == "run" and piece.text.strip() and opened:
            opened[-1] = (opened[-1][0], True)
        out.append(piece)
    return out


def _neighbours(found: list[Piece]) -> tuple[list[str], list[str]]:
    """For each piece, the last character of the text read before it and the first of the text read from it on
    ("" for none)."""
    before, after, last = [], [""] * len(found), ""
    for piece in found:
        before.append(last)
        last = piece.text[-1:] or last
    first = ""
    for i in range(len(found) - 1, -1, -1):
        first = found[i].text[:1] or first
        after[i] = first
    return before, after


def _unseen_change(element: Any) -> bool:
    """Whether ``element`` is a tracked change that shows no text (a deletion: its text is w:delText); one that shows
    some (an insertion of a content control showing its placeholder) keeps its place among the words."""
    return element.tag in _CHANGES and not any(t.text for t in element.iter(_T))


def _wordy(char: str) -> bool:
    """Whether ``char`` is part of a word: a letter, a mark or a digit."""
    return bool(char) and unicodedata.category(char)[0] in "LMN"
