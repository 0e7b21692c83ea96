""".docx limits, checked before python-docx unpacks and parses a file (``docxdoc.read_docx``): its parts, their
unpacked size, and the XML elements and attributes of its parts (counted as they stream); a broken zip is a 400."""

from __future__ import annotations

import contextlib
import io
import zipfile
from pathlib import PurePath
from typing import Any

from lxml import etree

from transduce.service.documents import (
    DOCX_INFLATION,
    MAX_DOCX_ATTRIBUTES,
    MAX_DOCX_ELEMENTS,
    MAX_DOCX_PARTS,
)
from transduce.service.errors import ApiError


def check_zip(name: str, data: bytes, max_bytes: int) -> None:
    """Refuse (413) a .docx that holds over ``MAX_DOCX_PARTS`` files, would unpack to over ``DOCX_INFLATION *
    max_bytes`` bytes (its zip directory says: the zip reader never gives more than a file declares), or whose XML
    has over ``MAX_DOCX_ELEMENTS`` elements (counted as it streams, stopping there): python-docx unpacks and parses
    all of it, and its time grows with the elements. A broken zip is a 400."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = archive.infolist()
            if len(files) > MAX_DOCX_PARTS:
                raise ApiError(413, f"{name} holds {len(files)} files, over the limit of {MAX_DOCX_PARTS} in a .docx")
            size, limit = sum(info.file_size for info in files), DOCX_INFLATION * max_bytes
            if size > limit:
                raise ApiError(
                    413,
                    f"{name} unpacks to {size} bytes, over the limit of {limit} ({DOCX_INFLATION} x max_file_bytes)",
                )
            # every part python-docx may parse, whatever its name (it follows the package's relationships, which
            # may point at word/document.bin; a binary part stops the parser at its first bytes), but not images:
            # python-docx keeps those as bytes, and an SVG picture is XML of its own
            counted = [info for info in files if not info.is_dir() and info.filename != CONTENT_TYPES]
            types = next((info for info in files if info.filename == CONTENT_TYPES), None)
            budget = _Budget(name)
            images = _image_parts(archive, types, budget) if types is not None else set()
            for info in counted:
                if info.filename not in images:
                    _count_elements(archive, info, budget)
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken zip raises several types
        raise ApiError(400, f"{name} is not a readable .docx file: {docx_problem(exc)}") from None


CONTENT_TYPES = "[Content_Types].xml"  # an OPC package's part types: by name (Override) or by ending (Default)


class _Budget:
    """The XML elements (``MAX_DOCX_ELEMENTS``) and attributes (``MAX_DOCX_ATTRIBUTES``, namespace declarations
    included) a .docx may hold, spent as its parts are read; 413 past either. Attributes count apart: 2,000 on each
    of 4,300 elements (a 303 KB upload) took 1.1 GB to parse."""

    def __init__(self, name: str) -> None:
        self.name, self.elements, self.attributes = name, MAX_DOCX_ELEMENTS, MAX_DOCX_ATTRIBUTES

    def spend(self, attributes: int, *, element: bool = True) -> None:
        self.elements -= element
        self.attributes -= attributes
        if self.elements < 0:
            raise ApiError(
                413, f"{self.name} has over {MAX_DOCX_ELEMENTS} XML elements, the limit for a .docx: split it"
            )
        if self.attributes < 0:
            raise ApiError(
                413, f"{self.name} has over {MAX_DOCX_ATTRIBUTES} XML attributes, the limit for a .docx: split it"
            )


def _count_elements(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget) -> list[Any]:
    """Stream one part's XML, spending ``budget`` on each element and its attributes, and letting go of each element
    once read (the whole tree was kept: 180 MB for 6.8 MB of XML); returns its elements with attributes that say a
    part type (Default and Override, for the content types); nothing for what is not XML."""
    typed: list[Any] = []
    events = ("end", "start-ns")
    with archive.open(info) as part, contextlib.suppress(etree.XMLSyntaxError):  # (python-docx judges the XML)
        for event, element in etree.iterparse(part, events=events, resolve_entities=False, no_network=True):
            if event == "start-ns":
                budget.spend(1, element=False)
                continue
            budget.spend(len(element.attrib))
            if element.get("ContentType") is not None and len(typed) < MAX_DOCX_PARTS:
                typed.append((element.get("Extension"), element.get("PartName"), element.get("ContentType")))
            element.clear()
            parent = element.getparent()  # (None for the root, which a comment or a processing instruction may precede)
            while parent is not None and element.getprevious() is not None:  # its earlier siblings, cleared already
                del parent[0]
    return typed


def _image_parts(archive: zipfile.ZipFile, types: zipfile.ZipInfo, budget: _Budget) -> set[str]:
    """The parts ``[Content_Types].xml`` types as images (image/*), by name or by their ending."""
    entries = _count_elements(archive, types, budget)
    by_ending = {ext.lower(): kind for ext, _, kind in entries if ext is not None}
    by_name = {name.lstrip("/"): kind for _, name, kind in entries if name is not None}
    names = [info.filename for info in archive.infolist()]
    return {
        n
        for n in names
        if by_name.get(n, by_ending.get(PurePath(n).suffix.lstrip(".").lower(), "")).startswith("image/")
    }


def docx_problem(exc: Exception) -> str:
    """What is wrong with a file that does not open as a .docx, in words a user can act on."""
    if isinstance(exc, zipfile.BadZipFile):
        return "it is not a zip archive, which every .docx is"
    if isinstance(exc, KeyError):  # a part the package lists or python-docx needs is not in the archive
        return "a part every Word document has (such as word/document.xml) is missing from it"
    if isinstance(exc, etree.XMLSyntaxError):
        return "the XML inside it is damaged"
    return "it does not hold a Word document (save it again from a word processor as .docx)"
