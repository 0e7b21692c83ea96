"""POST /translate_file with big and hostile files: linear-time parsing, decompression limits, long names, whitespace
runs and queue limits (the fake translator reverses and upper-cases the words of each sentence)."""

from __future__ import annotations

import errno
import gc
import io
import os
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import docx
import pytest

from tests.service.harness import FakeTranslator, serve
from tests.service.test_files import fetch, make_docx, round_trip, upload
from transduce.engine.text import segment
from transduce.service.documents import read_document
from transduce.service.errors import ApiError
from transduce.service.filestore import FileStore, StoreFullError
from transduce.service.routers.files import _pieces
from transduce.service.validation import Fitting

pytestmark = pytest.mark.anyio

# --- big and hostile files -----------------------------------------------------------------------------------------


def parse_and_rebuild_s(name: str, text: str) -> float:
    """Seconds to read ``text`` as the file ``name`` and rebuild it from its own units: the best of three runs (a
    shared machine's slow spell can take one), with the garbage collector off (its passes over every live object
    would blur how the time grows)."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            started = time.perf_counter()
            doc = read_document(name, text.encode())
            doc.rebuild(list(doc.units))
            best = min(best, time.perf_counter() - started)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize(
    ("name", "text"),
    [  # each once took seconds to minutes (work growing with the square of the paragraph), all under the GIL
        ("marks.html", "<p>" + "<b>A</b>. " * 8000 + "</p>"),  # 80 kB: every mark scanned for every sentence
        ("ticks.md", "Text " + " ".join("`" * n + "x" for n in range(1500, 0, -1)) + "\n"),  # unclosed code spans
        ("comments.md", "Text " + "<!-- x " * 16_000 + "\n"),  # unclosed comments
        ("heading.md", "# a" + " " * 40_000 + "b\n"),  # an ATX heading's closing #s looked for from every space
        ("links.md", "[a](u) `c` " * 16_000 + "\n"),  # the code spans of every link's text looked for in all
    ],
)
def test_big_markup_files_are_read_and_rebuilt_in_linear_time(name: str, text: str) -> None:
    assert parse_and_rebuild_s(name, text) < 2.0
    if name == "marks.html":  # twice the paragraph: about twice the time, not four times
        halves, wholes = [], []  # taken in turns, so that a slow spell of a shared machine slows both
        for _ in range(2):
            halves.append(parse_and_rebuild_s(name, "<p>" + "<b>A</b>. " * 4000 + "</p>"))
            wholes.append(parse_and_rebuild_s(name, text))
        assert min(wholes) < 3 * min(halves) + 0.05


async def test_a_file_far_over_max_file_chars_is_refused_before_it_is_parsed() -> None:
    markup = "<b></b>" * 1000  # 7,000 characters, none of them text: once parsed in full, then translated
    async with serve(max_file_chars=2000) as (client, _):
        r = await upload(client, "markup.html", markup.encode())
        ok = await upload(client, "fits.html", ("<b></b>" * 500 + "Hi.").encode())  # under twice the limit
    assert r.status_code == 413, r.text
    assert (
        r.json()["error"]
        == "markup.html has 7000 characters, markup and whitespace included, over 2 times the limit of 2000 "
        "characters of text (max_file_chars): split it"  # not "characters of text": none of them is
    )
    assert ok.status_code == 200, ok.text
    spaced = docx.Document()
    spaced.add_paragraph("Wide" + " " * 5000 + "gap.")  # sent as "Wide gap.": once cut into sentences in full
    out = io.BytesIO()
    spaced.save(out)
    with pytest.raises(ApiError, match=r"^wide.docx has 5008 characters of text, over the limit of 2000 \("):
        read_document("wide.docx", out.getvalue(), max_chars=2000)


def docx_with_body(xml: str, extra_files: int = 0) -> bytes:
    """A .docx whose document body starts with ``xml``, with ``extra_files`` more (empty) files in its zip."""
    import zipfile

    base = zipfile.ZipFile(io.BytesIO(make_docx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in base.namelist():
            part = base.read(item)
            archive.writestr(
                item, part.replace(b"<w:body>", b"<w:body>" + xml.encode()) if "document" in item else part
            )
        for k in range(extra_files):
            archive.writestr(f"extra/{k}", b"")
    return out.getvalue()


def _with_part_prefix(data: bytes, part: str, prefix: bytes) -> bytes:
    """The .docx ``data`` with ``prefix`` put before the root element of ``part`` (after its XML declaration)."""
    base, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in base.namelist():
            content = base.read(item)
            if item == part:
                declaration, _, rest = content.partition(b"?>")
                content = declaration + b"?>" + prefix + rest
            archive.writestr(item, content)
    return out.getvalue()


async def test_a_docx_that_unpacks_too_far_is_refused_before_it_is_parsed() -> None:
    text = "<w:p><w:r><w:t>" + "a" * 2000 + "</w:t></w:r></w:p>"
    bomb = docx_with_body(text * 1500)  # 3 MB of XML in a 40 kB upload
    assert len(bomb) < 60_000
    async with serve(max_file_bytes=150_000) as (client, _):
        r = await upload(client, "bomb.docx", bomb)
        assert (r.status_code, list(r.json())) == (413, ["error"])
        assert r.json()["error"].startswith("bomb.docx unpacks to ")
        assert r.json()["error"].endswith(" bytes, over the limit of 3000000 (20 x max_file_bytes)")
        r = await upload(client, "empty.docx", docx_with_body("<w:p/>" * 200_000))  # 2 MB: within that
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "empty.docx has over 200000 XML elements, the limit for a .docx: split it"
        assert (await upload(client, "letter.docx", make_docx())).status_code == 200  # a real one unpacks to 0.8 MB
    with pytest.raises(ApiError) as refused:
        read_document("many.docx", docx_with_body("", extra_files=5000), max_bytes=2_000_000)
    assert (refused.value.status, refused.value.message) == (
        413,
        "many.docx holds 5017 files, over the limit of 5000 in a .docx",
    )
    commented = docx_with_body("<w:p><w:r><w:t>Kept.</w:t></w:r></w:p>")  # a comment before a part's root: fine
    commented = _with_part_prefix(commented, "word/document.xml", b"<!-- made by a tool --><?mso-application x?>")
    assert read_document("c.docx", commented, max_bytes=2_000_000).units[0] == "Kept."
    # few elements of many attributes: 2,000 on each of 4,300 (a 303 kB upload) took 1.1 GB to parse
    attributes = " ".join(f'a{i}=""' for i in range(500))
    with pytest.raises(ApiError) as refused:
        read_document("wide.docx", docx_with_body(f"<w:p {attributes}/>" * 2_100), max_bytes=2_000_000)
    assert (refused.value.status, refused.value.message) == (
        413,
        "wide.docx has over 1000000 XML attributes, the limit for a .docx: split it",
    )


async def test_line_breaks_inside_a_docx_paragraph_are_kept() -> None:
    document = docx.Document()
    document.add_paragraph("Line one of the address,\nLine two.")  # a w:br between the lines
    document.add_paragraph("Before ").add_run("the break\nafter it.").bold = True
    out = io.BytesIO()
    document.save(out)
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "address.docx", out.getvalue()))
    assert fake.translated[1:] == ["Line one of the address,", "Line two.", "Before the break", "after it."]
    first, second = docx.Document(io.BytesIO(got.content)).paragraphs
    assert first.text == "ADDRESS, THE OF ONE LINE\nTWO. LINE"
    assert len(first._p.xpath(".//w:br")) == 1
    assert second.text == "BREAK THE BEFORE\nIT. AFTER"


async def test_tabs_inside_a_docx_paragraph_stay_where_they_were() -> None:
    """A tab had become a space: "Name:<tab>value" and a tab-aligned table of text lost their alignment. A tab now
    ends a sentence as a line break does and comes back as a tab."""
    document = docx.Document()
    document.add_paragraph("Name:\tJohn Smith")
    document.add_paragraph("\tTotal amount\t\t$5.00")
    fake, result = await round_trip(document, "tabs.docx")
    assert fake.translated[1:] == ["Name:", "John Smith", "Total amount"]  # ("$5.00" has no letters: kept)
    first, second = result.paragraphs
    assert [first.text, second.text] == ["NAME:\tSMITH JOHN", "\tAMOUNT TOTAL\t\t$5.00"]
    assert len(second._p.xpath(".//w:tab")) == 3


async def test_a_long_file_name_is_cut_and_a_failed_save_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve(files_dir=str(tmp_path)) as (client, _):
        r = await upload(client, "x" * 250 + ".txt", b"Hello world.")  # once a 500: "File name too long"
        got = await fetch(client, r)
    assert r.json()["translatedFileUrl"].endswith("/" + "x" * 150 + ".de.txt")  # MAX_STEM bytes
    assert got.text == "WORLD. HELLO"
    store = FileStore(tmp_path / "store", ttl_s=60, max_files=1)

    def failing(error: int) -> Callable[[Path, bytes], int]:
        def write(self: Path, data: bytes) -> int:
            raise OSError(error, os.strerror(error))

        return write

    monkeypatch.setattr(Path, "write_bytes", failing(errno.ENOSPC))
    with pytest.raises(StoreFullError, match="no disk space left"):  # the service's 503
        store.save("a.de.txt", b"data")
    monkeypatch.setattr(Path, "write_bytes", failing(errno.EACCES))
    with pytest.raises(PermissionError):  # not the disk's room: as it is (a 500, logged)
        store.save("a.de.txt", b"data")
    assert not list((tmp_path / "store").iterdir())  # no empty folder left behind
    store.check_room(4)  # and the room each took is free again (max_files=1)


async def test_a_long_run_of_whitespace_is_sent_in_pieces_within_max_chars() -> None:
    line = "word " * 300 + " " * 6000 + "word " * 300  # a 6,005-character piece once failed the whole file
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "spaced.txt", line.strip().encode()))
    assert " " * 6000 in got.text and got.text.split() == ["WORD"] * 600
    assert all(sum(map(len, call)) <= 5000 for call in fake.calls[1:])
    units = [line.strip(), "A. B. " * 20 + " " * 30 + "C."]
    fitting = Fitting(lambda text: all(len(s.split()) <= 50 for s in segment(text).sentences), lambda text: [])
    pieces = _pieces(units, 100, fitting, max_sentences=8)
    assert ["".join(text for i, text, _ in pieces if i == k) for k in (0, 1)] == units  # nothing lost
    assert all(len(text) <= 100 and n <= 8 for _, text, n in pieces)


async def test_a_file_is_sent_in_requests_within_max_queue_items_sentences() -> None:
    lines = ["Aa. Bb. Cc. Dd. Ee. Ff. Gg. Hh. Ii. Jj. Kk. Ll."] + ["One. Two. Three."] * 10
    fake = FakeTranslator()
    async with serve(fake, max_queue_items=8) as (client, _):
        got = await fetch(client, await upload(client, "short.txt", "\n".join(lines).encode()))
    assert got.text.split("\n") == [lines[0].upper()] + ["ONE. TWO. THREE."] * 10
    assert max(map(len, fake.calls[1:])) <= 8  # once a 413: "request has 12 sentences, over the limit of 8"


async def test_an_alignment_tab_comes_back_with_its_alignment_and_leader() -> None:
    """An alignment tab (w:ptab: a header's "Title<centred tab>Draft", a leader of dots) came back as a plain tab,
    so the text after it lost its place. Each tab comes back as the element it was."""
    import copy

    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    paragraph = document.add_paragraph()
    run = paragraph.add_run("Annual report")
    ptab = OxmlElement("w:ptab")
    for name, value in (("w:relativeTo", "margin"), ("w:alignment", "right"), ("w:leader", "dot")):
        ptab.set(qn(name), value)
    run._r.append(ptab)
    run._r.append(OxmlElement("w:tab"))
    run._r.add_t("First draft")
    typed = document.add_paragraph()  # a tab character typed into the text, then an alignment tab
    typed.add_run().text = "Name"
    typed.runs[0]._r.append(OxmlElement("w:t"))
    typed.runs[0]._r[-1].text = "\tAddress"
    typed.runs[0]._r.append(copy.deepcopy(ptab))
    typed.runs[0]._r.add_t("Page")
    fake, result = await round_trip(document, "ptab.docx")
    assert fake.translated[1:] == ["Annual report", "First draft", "Name", "Address", "Page"]
    written, second = result.paragraphs
    assert written.text == "REPORT ANNUAL\t\tDRAFT FIRST"
    tabs = written._p.xpath("./w:r/w:ptab | ./w:r/w:tab")
    assert [t.tag.rsplit("}", 1)[1] for t in tabs] == ["ptab", "tab"]
    assert [tabs[0].get(qn(n)) for n in ("w:relativeTo", "w:alignment", "w:leader")] == ["margin", "right", "dot"]
    assert second.text == "NAME\tADDRESS\tPAGE"  # the typed tab is the plain one, the alignment tab stays second
    assert [t.tag.rsplit("}", 1)[1] for t in second._p.xpath("./w:r/w:ptab | ./w:r/w:tab")] == ["tab", "ptab"]
