"""POST /translate_file and GET /download_file through the real app over the fake translator (which reverses and
upper-cases the words of each sentence): .txt, .md, .html and .docx, limits, detection, deadline, hang-ups, metrics,
expiry, API keys."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest
from starlette.types import Message, Scope

from tests.service.harness import FakeTranslator, Gate, IsolatedSettings, fake_translation, serve
from transduce.service.documents import read_document

pytestmark = pytest.mark.anyio
EN_DE = {"source": "en", "target": "de"}


async def upload(client: httpx.AsyncClient, name: str, data: bytes, **fields: Any) -> httpx.Response:
    return await client.post("/translate_file", files={"file": (name, data)}, data={**EN_DE, **fields})


async def fetch(client: httpx.AsyncClient, response: httpx.Response) -> httpx.Response:
    assert response.status_code == 200, response.text
    url = response.json()["translatedFileUrl"]
    assert url.startswith("http://test/download_file/")
    return await client.get(url)


async def test_a_text_file_keeps_its_lines_blank_lines_and_indentation(tmp_path: Path) -> None:
    text = "Hello world. How are you?\n\n  Indented line\nlast line"
    async with serve(files_dir=str(tmp_path)) as (client, _):
        got = await fetch(client, await upload(client, "notes.txt", text.encode()))
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain")
    assert 'filename="notes.de.txt"' in got.headers["content-disposition"]
    expected = f"{fake_translation('Hello world.')} {fake_translation('How are you?')}\n\n  LINE INDENTED\nLINE LAST"
    assert got.text == expected


async def test_download_ranges_as_starlette_serves_them_and_bad_ones_in_our_words(tmp_path: Path) -> None:
    """A byte range is served (206); a malformed Range is ignored and the whole file sent (RFC 9110 lets a server),
    not Starlette's plain-text 400; one that starts past the end is a JSON 416 with the file's size."""
    async with serve(files_dir=str(tmp_path)) as (client, _):
        r = await upload(client, "notes.txt", b"Hello world.")
        url = r.json()["translatedFileUrl"]
        whole = await client.get(url)
        assert whole.status_code == 200, whole.text
        size = len(whole.content)
        part = await client.get(url, headers={"Range": "bytes=0-3"})
        assert part.status_code == 206 and part.content == whole.content[:4]
        for bad in ("bytes=abc", "bytes=9-5", "lines=0-3", "garbage", "bytes=,"):
            r = await client.get(url, headers={"Range": bad})
            assert r.status_code == 200 and r.content == whole.content, (bad, r.status_code, r.text)
        for past in (f"bytes={size}-", f"bytes={size + 50}-{size + 60}"):
            r = await client.get(url, headers={"Range": past})
            assert r.status_code == 416 and r.json() == {
                "error": f"the range asked for starts past the file's end ({size} bytes)"
            }, r.text
            assert r.headers["content-range"] == f"bytes */{size}"


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("Übersetzung über.txt", "Übersetzung_über.de.txt"),  # letters of any script are kept
        ("日本.txt", "日本.de.txt"),
        ("🙂 ✓.txt", "translation.de.txt"),  # nothing of the stem is left: not a name that looks like "de.txt"
        ("../../etc/passwd.txt", "passwd.de.txt"),  # the sender's folders are never part of the name
        ("名" * 120 + ".txt", "名" * 50 + ".de.txt"),  # cut to 150 UTF-8 bytes, within what file systems allow
        ("हिन्दी.txt", "हिन्दी.de.txt"),  # vowel signs and viramas are marks, not "_"
        ("Re\u0301sume\u0301.txt", "Résumé.de.txt"),  # macOS's decomposed name, in NFC
    ],
)
async def test_download_names_keep_the_senders_letters(tmp_path: Path, name: str, stored: str) -> None:
    from urllib.parse import quote

    async with serve(files_dir=str(tmp_path)) as (client, _):
        r = await upload(client, name, b"Hello world.")
        assert r.json()["translatedFileUrl"].endswith("/" + quote(stored)), r.text
        got = await fetch(client, r)
    assert got.status_code == 200 and quote(stored) in got.headers["content-disposition"]
    ascii_only = got.headers["content-disposition"].split(";")[1].strip()  # for clients without filename*
    assert ascii_only.startswith('filename="') and ascii_only.isascii() and ascii_only.endswith('.de.txt"')


async def test_markdown_keeps_markers_and_code() -> None:
    md = "# The title\n\n- first item\n1. second item\n> quoted text\n\n```\ncode stays\n```\n    indented code\n"
    async with serve() as (client, _):
        got = await fetch(client, await upload(client, "readme.md", md.encode()))
    assert (
        got.text
        == "# TITLE THE\n\n- ITEM FIRST\n1. ITEM SECOND\n> TEXT QUOTED\n\n```\ncode stays\n```\n    indented code\n"
    )


def make_docx() -> bytes:
    document = docx.Document()
    document.add_paragraph("First paragraph here.")
    styled = document.add_paragraph("Bold ")
    styled.add_run("and plain").bold = False
    styled.runs[0].bold = True
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Cell one"
    table.cell(0, 1).text = "Cell two"
    merged = table.cell(1, 0).merge(table.cell(1, 1))
    merged.text = "Merged cell"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


async def round_trip(document: Any, name: str = "doc.docx") -> tuple[FakeTranslator, Any]:
    """``document`` (python-docx) uploaded and translated by the fake: the fake, and the translated document."""
    data = io.BytesIO()
    document.save(data)
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, name, data.getvalue()))
    return fake, docx.Document(io.BytesIO(got.content))


async def test_a_docx_file_translates_body_and_table_paragraphs() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "letter.docx", make_docx()))
    result = docx.Document(io.BytesIO(got.content))
    assert [p.text for p in result.paragraphs] == ["HERE. PARAGRAPH FIRST", "PLAIN AND BOLD"]
    assert result.paragraphs[1].runs[0].bold is False  # one sentence: into its first run, as most of it looked
    table = result.tables[0]
    assert [table.cell(0, 0).text, table.cell(0, 1).text, table.cell(1, 0).text] == [
        "ONE CELL",
        "TWO CELL",
        "CELL MERGED",
    ]
    assert fake.translated.count("Merged cell") == 1  # a merged cell is translated once, not once per column


async def test_a_docx_file_translates_nested_tables_and_content_controls_in_document_order() -> None:
    """python-docx's ``tables`` and ``cell.paragraphs`` hold no table inside a cell, and its ``paragraphs`` none inside
    a content control (w:sdt): those stayed untranslated. Every paragraph is read in document order now, except one
    inside another's run (a text box)."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    document.add_paragraph("Before the table.")
    outer = document.add_table(rows=1, cols=1).cell(0, 0)
    outer.text = "Outer cell"
    outer.add_table(rows=1, cols=1).cell(0, 0).text = "Inner cell"
    control, content = OxmlElement("w:sdt"), OxmlElement("w:sdtContent")
    held = document.add_paragraph("In a control.")
    held._p.addprevious(control)
    control.append(content)
    content.append(held._p)
    boxed, box, inside = document.add_paragraph("Has a box."), OxmlElement("w:pict"), OxmlElement("w:txbxContent")
    box.append(inside)
    boxed.runs[0]._r.append(box)
    inside.append(document.add_paragraph("Boxed text.")._p)
    document.add_paragraph("After it all.")
    fake, result = await round_trip(document, "nested.docx")
    sent = ["Before the table.", "Outer cell", "Inner cell", "In a control.", "Has a box.", "After it all."]
    assert fake.translated[1:] == sent
    cell = result.tables[0].cell(0, 0)
    assert [cell.paragraphs[0].text, cell.tables[0].cell(0, 0).text] == ["CELL OUTER", "CELL INNER"]
    sdt = result.element.body.find(qn("w:sdt"))
    assert "".join(t.text for t in sdt.iter(qn("w:t"))) == "CONTROL. A IN"
    box = result.element.body.find(f".//{qn('w:txbxContent')}")
    assert "".join(t.text for t in box.iter(qn("w:t"))) == "Boxed text."  # kept, with its paragraph
    assert result.paragraphs[-2].text == "BOX. A HAS"


async def test_docx_formatting_that_changes_between_sentences_stays_with_them() -> None:
    """All of a paragraph's text went into its first run: a bold "Warning." made the whole translation bold, an
    italic sentence lost its italics. A change of formatting between two sentences now keeps each sentence's
    translation in a run formatted as its source. A label in a look of its own that starts a paragraph ("Note:") is a
    sentence of its own (it made the whole paragraph bold); inside a sentence, the look of most of its text is kept
    (it was the first run's: a bold "Dr." made the sentence bold)."""
    document = docx.Document()
    for pieces in (
        [("Warning.", "b"), (" Do not open the case. It is hot.", "")],
        [("First one. ", ""), ("Second in italics. ", "i"), ("Third one.", "")],
        [("Note:", "b"), (" save your work before you close it.", "")],  # a label
        [("Dr.", "b"), (" Smith is here.", "")],  # no sentence ends after an abbreviation
    ):
        paragraph = document.add_paragraph()
        for text, look in pieces:
            run = paragraph.add_run(text)
            run.bold, run.italic = look == "b", look == "i"
    fake, result = await round_trip(document, "looks.docx")
    assert fake.translated[1:] == [
        "Warning.",
        "Do not open the case.",
        "It is hot.",
        "First one.",
        "Second in italics.",
        "Third one.",
        "Note:",
        "save your work before you close it.",
        "Dr. Smith is here.",
    ]
    looks = [[(r.text, r.bold, r.italic) for r in p.runs if r.text] for p in result.paragraphs]
    assert looks == [
        [("WARNING.", True, False), (" CASE. THE OPEN NOT DO HOT. IS IT", False, False)],
        [("ONE. FIRST ", False, False), ("ITALICS. IN SECOND ", False, True), ("ONE. THIRD", False, False)],
        [("NOTE:", True, False), (" IT. CLOSE YOU BEFORE WORK YOUR SAVE", False, False)],
        [("HERE. IS SMITH DR.", False, False)],
    ]


FOOTNOTES = "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


@pytest.mark.parametrize(
    ("runs", "sentences"),
    [
        ([("Note:", "<w:b/>"), (" save it.", "")], ["Note:", "save it."]),  # a label
        ([("注意：", "<w:b/>"), ("请保存。", "")], ["注意：", "请保存。"]),
        ([("Meet me at 10:", ""), ("30 today.", '<w:lang w:val="en-GB"/>')], ["Meet me at 10:30 today."]),  # unseen
        ([("The ratio is ", ""), ("3:", "<w:b/>"), ("1 here.", "")], ["The ratio is 3:1 here."]),  # not the first look
        ([("Important information regarding parking: the garage is", "<w:b/>"), (" shut.", "")], None),  # too long
        ([("根据公司规定，所有员工进入车间时必须遵守以下要求：", "<w:b/>"), ("戴安全帽。", "")], None),  # too long
    ],
)
def test_a_docx_label_is_a_short_first_stretch_in_a_look_of_its_own(
    runs: list[tuple[str, str]], sentences: list[str] | None
) -> None:
    """A label that starts a paragraph in a look of its own is a sentence of its own; a colon where only an unseen
    property changes (the spelling language), after a later change of look, or after a long stretch is not one (a
    review found each split mid-sentence)."""
    from docx.oxml.parser import parse_xml

    from transduce.service.documents import read_document

    document = docx.Document()
    paragraph = document.add_paragraph()
    for text, look in runs:
        xml = f'<w:r xmlns:w="{W}"><w:rPr>{look}</w:rPr><w:t xml:space="preserve">{text}</w:t></w:r>'
        paragraph._p.append(parse_xml(xml))
    data = io.BytesIO()
    document.save(data)
    whole = "".join(text for text, _ in runs)
    assert list(read_document("label.docx", data.getvalue()).units) == (sentences or [whole])


async def test_a_docx_hidden_text_is_translated_apart_and_stays_hidden() -> None:
    """Hidden text (w:vanish) went into its sentence: written into a hidden first run, it hid the whole translation;
    into a shown one, it showed the hidden words. It is a stretch of its own now, translated apart, still hidden."""
    document = docx.Document()
    hidden = document.add_paragraph()
    hidden.add_run("Hidden note").font.hidden = True
    hidden.add_run(" The lamp is shown.")
    fake, result = await round_trip(document, "hidden.docx")
    assert fake.translated[1:] == ["Hidden note", "The lamp is shown."]
    assert [(r.text, r.font.hidden) for r in result.paragraphs[0].runs] == [
        ("NOTE HIDDEN", True),
        (" SHOWN. IS LAMP THE", None),
    ]


async def test_a_docx_sentence_takes_the_look_most_of_its_text_has_where_its_first_run_was() -> None:
    """A sentence's translation goes into its first run, in the look most of its text had: runs Word splits by
    spelling language or proofing marks are one look (a bold word among four such runs made it all bold), and a
    footnote mark or a picture after the text stays after it."""
    from docx.oxml.parser import parse_xml

    document = docx.Document()
    split = document.add_paragraph()
    for text, extra in (("The ", '<w:lang w:val="en-US"/>'), ("important", "<w:b/>"), (" part is ", "<w:noProof/>")):
        split._p.append(
            parse_xml(f'<w:r xmlns:w="{W}"><w:rPr>{extra}</w:rPr><w:t xml:space="preserve">{text}</w:t></w:r>')
        )
    split.add_run("here.")
    marked = document.add_paragraph()
    marked.add_run("Smith").italic = True
    marked._p.append(parse_xml(f'<w:r xmlns:w="{W}"><w:footnoteReference w:id="1"/></w:r>'))
    marked.add_run(" argued that the effect was large.")
    fake, result = await round_trip(document, "looks.docx")
    assert fake.translated[1:] == ["The important part is here.", "Smith argued that the effect was large."]
    first, second = ([(r.text, r.bold, r.italic) for r in p.runs if r.text] for p in result.paragraphs)
    assert first == [("HERE. IS PART IMPORTANT THE", None, None)]
    assert second == [("LARGE. WAS EFFECT THE THAT ARGUED SMITH", None, None)]  # restyled as most of it
    assert result.paragraphs[1]._p.xml.index("LARGE.") < result.paragraphs[1]._p.xml.index("footnoteReference")


def with_footnote(data: bytes, text: str) -> bytes:
    """The .docx ``data`` with a footnotes part holding a separator and one footnote of ``text`` (python-docx cannot
    write footnotes)."""
    import zipfile

    notes = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:footnotes xmlns:w="{W}">'
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
        f'<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> {text}</w:t></w:r></w:p>'
        "</w:footnote></w:footnotes>"
    )
    relationship = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/footnotes"
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.namelist():
            content = source.read(item)
            if item == "[Content_Types].xml":
                override = f'<Override PartName="/word/footnotes.xml" ContentType="{FOOTNOTES}"/>'
                content = content.replace(b"</Types>", override.encode() + b"</Types>")
            if item == "word/_rels/document.xml.rels":
                link = f'<Relationship Id="rId99" Type="{relationship}" Target="footnotes.xml"/>'
                content = content.replace(b"</Relationships>", link.encode() + b"</Relationships>")
            archive.writestr(item, content)
        archive.writestr("word/footnotes.xml", notes)
    return out.getvalue()


async def test_a_docx_translates_its_headers_footers_and_footnotes() -> None:
    """Headers, footers and footnotes were left in the source language: each is translated now, once however many
    sections share it."""
    import zipfile

    from docx.oxml.parser import parse_xml

    document = docx.Document()
    document.add_paragraph("Body text.")
    document.add_section()  # a second section sharing the first one's header and footer
    document.sections[0].header.paragraphs[0].text = "Header text."
    document.sections[0].footer.paragraphs[0].text = "Footer text."
    numbered = document.sections[0].footer.add_paragraph("Page ")  # "Page 1": Word fills the field in again
    for xml in ('<w:fldChar w:fldCharType="begin"/>', "<w:instrText>PAGE</w:instrText>", "<w:t>1</w:t>"):
        numbered._p.append(parse_xml(f'<w:r xmlns:w="{W}">{xml}</w:r>'))
    data = io.BytesIO()
    document.save(data)
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "notes.docx", with_footnote(data.getvalue(), "A footnote.")))
    assert fake.translated[1:] == ["Body text.", "Header text.", "Footer text.", "A footnote."]
    result = docx.Document(io.BytesIO(got.content))
    footer = result.sections[1].footer.paragraphs
    assert [result.sections[1].header.paragraphs[0].text, footer[0].text, footer[1].text] == [
        "TEXT. HEADER",
        "TEXT. FOOTER",
        "Page 1",  # a paragraph with a field, in a header or footer: left as it is
    ]
    notes = zipfile.ZipFile(io.BytesIO(got.content)).read("word/footnotes.xml").decode()
    assert "<w:separator/>" in notes and "<w:footnoteRef/>" in notes and "> FOOTNOTE. A</w:t>" in notes


async def test_a_docx_whose_footnotes_are_broken_is_refused() -> None:
    """A footnotes part that is not XML was passed over: the body came back translated, its notes not, without a
    word. It is a 400 naming the part, as a broken body is."""
    document = docx.Document()
    document.add_paragraph("Body text.")
    data = io.BytesIO()
    document.save(data)
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await upload(client, "notes.docx", with_footnote(data.getvalue(), "A <broken footnote."))
    assert r.status_code == 400
    assert r.json()["error"].startswith("notes.docx is not a readable .docx file: its part /word/footnotes.xml is not")
    assert fake.translated[1:] == []
    import zipfile

    source, rewritten = zipfile.ZipFile(io.BytesIO(with_footnote(data.getvalue(), "A footnote."))), io.BytesIO()
    with zipfile.ZipFile(rewritten, "w") as archive:  # a footnotes part whose root is another part's: skipped before
        for item in source.namelist():
            content = source.read(item)
            archive.writestr(
                item, content.replace(b"w:footnotes", b"w:endnotes") if item.endswith("tes.xml") else content
            )
    wrong = rewritten.getvalue()
    async with serve(fake) as (client, _):
        r = await upload(client, "notes.docx", wrong)
    assert (r.status_code, r.json()["error"]) == (
        400,
        "notes.docx is not a readable .docx file: its footnotes part /word/footnotes.xml holds <endnotes>, not "
        "<w:footnotes>",
    )


async def test_a_docx_leaves_alone_what_word_fills_itself() -> None:
    """Paragraphs Word fills itself are not translated: a table of contents (as text, its page numbers would be the
    model's and its fields emptied), a content control bound to data or showing its placeholder, an older reader's
    fallback (mc:Fallback, the text again), and a cell a cell above merges into (not shown)."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn
    from lxml import etree

    document = docx.Document()

    def control(text: str, *settings: str) -> None:
        sdt, properties, content = OxmlElement("w:sdt"), OxmlElement("w:sdtPr"), OxmlElement("w:sdtContent")
        for setting in settings:
            name, _, value = setting.partition("=")
            element = OxmlElement(name)
            if value:
                element.set(qn("w:val"), value)
            properties.append(element)
        paragraph = document.add_paragraph(text)
        paragraph._p.addprevious(sdt)
        sdt.extend([properties, content])
        content.append(paragraph._p)

    document.add_paragraph("Translated one.")
    control("Introduction 3", "w:docPartObj")
    gallery = OxmlElement("w:docPartGallery")
    gallery.set(qn("w:val"), "Table of Contents")
    document.element.body.findall(f".//{qn('w:docPartObj')}")[-1].append(gallery)
    control("Bound text", "w:dataBinding")
    control("Click here to enter text.", "w:showingPlcHdr")
    control("Translated two.", "w:alias=Note")
    mc = "http://schemas.openxmlformats.org/markup-compatibility/2006"
    alternate = etree.SubElement(document.element.body, f"{{{mc}}}AlternateContent")
    choice, fallback = etree.SubElement(alternate, f"{{{mc}}}Choice"), etree.SubElement(alternate, f"{{{mc}}}Fallback")
    choice.set("Requires", "w14")
    choice.append(document.add_paragraph("Translated three.")._p)
    fallback.append(document.add_paragraph("Fallback text")._p)
    document.element.body.append(document.element.body.find(qn("w:sectPr")))  # the section's properties come last
    table = document.add_table(rows=2, cols=1)
    table.cell(0, 0).text, table.cell(1, 0).text = "Translated four.", "Hidden below"
    for row, value in ((0, "restart"), (1, "")):
        merge = OxmlElement("w:vMerge")
        if value:
            merge.set(qn("w:val"), value)
        table.cell(row, 0)._tc.get_or_add_tcPr().append(merge)
    data = io.BytesIO()
    document.save(data)
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        await fetch(client, await upload(client, "filled.docx", data.getvalue()))
    assert fake.translated[1:] == ["Translated one.", "Translated two.", "Translated three.", "Translated four."]


async def test_long_files_are_sent_in_requests_within_the_limits() -> None:
    lines = [f"Line number {i}. It has two sentences." for i in range(30)] + ["A long one. " * 12]
    fake = FakeTranslator()
    async with serve(fake, max_items=4, max_chars=100) as (client, _):
        got = await fetch(client, await upload(client, "long.txt", "\n".join(lines).encode()))
    out = got.text.split("\n")
    assert (
        len(out) == 31 and out[0] == f"{fake_translation('Line number 0.')} {fake_translation('It has two sentences.')}"
    )
    # cut between its sentences, joined again, its trailing space kept
    assert out[-1] == " ".join([fake_translation("A long one.")] * 12) + " "
    assert all(sum(map(len, call)) <= 100 for call in fake.calls[1:])  # every request within max_chars


async def test_a_sentence_over_the_token_limit_is_translated_in_parts_not_refused() -> None:
    """A file cannot be split by its sender: a sentence over max_sentence_tokens is cut at a clause mark or a space
    into parts within the limit (each translated on its own), never a 400 for the whole file, never truncated."""
    long = "This first clause is long, and this second clause is long too; then the rest goes on and on to the end."
    text = f"Short one. {long} Another short one.\nNext line."
    fake = FakeTranslator()
    async with serve(fake, max_sentence_tokens=8) as (client, _):
        got = await fetch(client, await upload(client, "long.txt", text.encode()))
    sent = [s for call in fake.calls[1:] for s in call]
    assert all(fake.count_tokens(s) <= 8 for s in sent)  # every request within the limit
    words = [w for s in sent for w in s.split()]
    assert " ".join(words) == " ".join(text.split())  # every word sent once, in order: nothing dropped
    assert "This first clause is long," in sent  # cut after the comma
    assert got.text.split("\n")[1] == fake_translation("Next line.")


async def test_a_sentence_with_a_server_glossary_term_is_cut_as_validation_counts_it(tmp_path: Path) -> None:
    """The server's glossary masks a term as a placeholder, which max_sentence_tokens counts as two tokens however few
    the term's own: the cutter must count it so, or a sentence it took as fitting failed the whole file."""
    glossary = tmp_path / "glossary.json"
    glossary.write_text('{"en-de": [{"source": "Zebra", "target": "Zebra"}]}', encoding="utf-8")
    text = "One two three Zebra five six seven.\nNext line."  # 7 words + eos: 8 tokens, 9 as validation counts
    fake = FakeTranslator()
    async with serve(fake, max_sentence_tokens=8, glossary_file=str(glossary)) as (client, _):
        got = await fetch(client, await upload(client, "g.txt", text.encode()))
    assert "Zebra" in got.text.split("\n")[0]  # the term kept, the sentence cut into parts that fit
    assert got.text.split("\n")[1] == fake_translation("Next line.")


async def test_a_file_is_cut_as_validation_reads_terms_that_hold_a_sentence_end_or_many_words(tmp_path: Path) -> None:
    """A term holding a sentence end ("Co. KG") ends no sentence once masked: the cutter cut there, and the sentence
    validation read was over the limit. A cut inside a five-word term counted its words, not its placeholder: the
    part did not fit, and the term was lost. Both failed the whole file with a 400."""
    glossary = tmp_path / "glossary.json"
    terms = [
        {"source": "Acme GmbH & Co. KG", "target": None},
        {"source": "alpha beta gamma delta epsilon", "target": None},
    ]
    glossary.write_text(json.dumps({"en-de": terms}), encoding="utf-8")
    lines = [
        "one two three four five Acme GmbH & Co. KG six seven eight nine ten.",
        "d bhfbhf aagehe de gcgccad e hbhh alpha beta gamma delta epsilon dbceaac ag daeaad ffba cechabcaa g fehfafff "
        "egdfb ehhfcf gegbfa ebgc db daehaagh hgbghed dehfabb.",
    ]
    fake = FakeTranslator()
    async with serve(fake, max_sentence_tokens=10, glossary_file=str(glossary)) as (client, _):
        got = await fetch(client, await upload(client, "terms.txt", "\n".join(lines).encode()))
    first, second = got.text.split("\n")
    assert "Acme GmbH & Co. KG" in first and "alpha beta gamma delta epsilon" in second  # kept whole, as written
    sent = [s for call in fake.calls[1:] for s in call]
    assert sorted(w for s in sent for w in s.split() if "[" not in w) == sorted(
        w
        for line in lines
        for w in line.split()
        if w not in ["Acme", "GmbH", "&", "Co.", "KG", "alpha", "beta", "gamma", "delta", "epsilon"]
    )  # every other word sent once: nothing dropped


class CountsWhere(FakeTranslator):
    """The fake, recording the thread each text was counted on."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: dict[str, int] = {}

    def count_tokens(self, text: str) -> int:
        self.counted[text] = threading.get_ident()
        return super().count_tokens(text)


async def test_a_files_pieces_are_cut_off_the_event_loop() -> None:
    """Cutting a file's long sentences to the limits tokenizes and masks prefix after prefix (seconds for a file of
    long lines of characters the model cannot spell), which held every other request on the event loop."""
    long = " ".join(f"word{i}" for i in range(300)) + "."
    fake = CountsWhere()
    async with serve(fake, max_sentence_tokens=50) as (client, _):
        loop_thread = threading.get_ident()
        got = await fetch(client, await upload(client, "long.txt", long.encode()))
    assert sorted(got.text.split()) == sorted(w.upper() for w in long.split())  # every word back, once
    assert fake.counted[long] != loop_thread  # the whole sentence, counted where its pieces were cut
    assert all(fake.count_tokens(s) <= 50 for call in fake.calls[1:] for s in call)


def zipped(members: dict[str, bytes]) -> bytes:
    """A zip archive of ``members`` (name -> bytes)."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "status", "message"),
    [
        ("slides.pptx", b"x", 400, "not supported: send .txt, .md, .html, .htm, .docx"),
        ("noext", b"x", 400, "not supported"),
        ("latin1.txt", "Grüße".encode("latin-1"), 400, "is not UTF-8 text"),
        ("broken.docx", b"PK\x03\x04 not a zip", 400, "not a readable .docx file: it is not a zip archive"),
        ("empty.docx", zipped({"x": b"x"}), 400, "not a readable .docx file: a part every Word document has"),
        ("badxml.docx", zipped({"[Content_Types].xml": b"<Types"}), 400, "docx file: the XML inside it is damaged"),
        ("big.txt", b"x" * 20_000, 413, "upload exceeds the limit of 3000 bytes (max_file_bytes; the form's other"),
        ("deep.html", b"<b>" * 200 + b"x", 400, "deep.html nests HTML elements more than 128 deep"),
        ("many.txt", b"word " * 500, 413, "2499 characters of text, over the limit of 2000 (max_file_chars)"),
    ],
)
async def test_files_that_cannot_be_translated(name: str, data: bytes, status: int, message: str) -> None:
    async with serve(max_file_bytes=3000, max_file_chars=2000) as (client, _):
        r = await upload(client, name, data)
    assert (r.status_code, list(r.json())) == (status, ["error"]) and message in r.json()["error"], r.text


async def test_form_errors_api_keys_and_languages() -> None:
    async with serve(api_keys="secret") as (client, _):
        assert (await upload(client, "a.txt", b"Hi.")).status_code == 401
        assert (await upload(client, "a.txt", b"Hi.", api_key="secret")).status_code == 200
        r = await client.post("/translate_file", json={"q": "x", **EN_DE})
        assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]
        r = await client.post("/translate_file", data={**EN_DE, "api_key": "secret"}, files={"other": ("a", b"x")})
        assert r.status_code == 422 and "file" in r.json()["error"]
        two = [("file", ("a.txt", b"Hi.")), ("file", ("b.txt", b"Ho."))]
        r = await client.post("/translate_file", data={**EN_DE, "api_key": "secret"}, files=two)
        assert r.status_code == 422 and r.json()["error"].endswith("send one file, in the field file"), r.text
        headers = {"content-type": "multipart/form-data"}
        r = await client.post("/translate_file", content=b"x", headers=headers)
        assert r.status_code == 422 and "has no boundary" in r.json()["error"], r.text
        r = await upload(client, "a" * 4500 + ".txt", b"Hi.", api_key="secret")  # over the parser's part headers
        assert r.status_code == 422 and "headers take more than 4 KiB" in r.json()["error"], r.text
        r = await upload(client, "a.txt", b"Hi.", api_key="secret", target="fr")
        assert r.status_code == 400 and "en->fr is not supported" in r.json()["error"]
        fields = b"".join(
            b'--XYZ\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % pair
            for pair in ((b"source", b"en"), (b"target", b"de"), (b"api_key", b"secret"))
        )
        whole = fields + b'--XYZ\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nHello.\r\n'
        quoted = {"content-type": 'multipart/form-data; boundary="XYZ"'}
        r = await client.post("/translate_file", content=whole + b"--XYZ--\r\n", headers=quoted)
        assert r.status_code == 200, r.text
        noted = b'--XYZ\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nNotes --XYZ-- here.\r\n'
        late = b'--XYZ\r\nContent-Disposition: form-data; name="format"\r\n\r\ntex'  # cut inside a later part
        r = await client.post("/translate_file", content=noted + fields + late, headers=quoted)
        assert r.status_code == 422 and "cut short" in r.json()["error"], r.text  # the text in the file is no end
        r = await client.post(
            "/translate_file", content=whole[:-10], headers={"content-type": "multipart/form-data; boundary="}
        )
        assert r.status_code == 422 and "boundary is empty" in r.json()["error"], r.text
        epilogue = b"--XYZ--\r\n" + b"an epilogue, which RFC 2046 allows and parsers ignore. " * 30
        r = await client.post("/translate_file", content=whole + epilogue, headers=quoted)  # was "cut short"
        assert r.status_code == 200, r.text
        r = await client.post("/translate_file", content=whole[:-10], headers=quoted)  # cut off inside the file
        assert r.status_code == 422 and r.json() == {
            "error": "the multipart body ends before its closing boundary: it was cut short, send it whole"
        }, r.text
        odd = {"content-type": "multipart/form-data; boundary=XYZ; charset=foo"}  # Starlette read it as Latin-1
        r = await client.post("/translate_file", content=whole + b"--XYZ--\r\n", headers=odd)
        assert r.status_code == 415 and "unsupported charset 'foo'" in r.json()["error"], r.text
        r = await client.post(
            "/translate_file", content=whole.replace(b"\r\nde", b"\r\nd\xff") + b"--XYZ--\r\n", headers=quoted
        )
        assert r.status_code == 422 and r.json() == {
            "error": "the form field 'target' is not utf-8 text: send the form as utf-8"
        }, r.text


async def test_the_download_url_uses_public_url_when_set_not_the_host_header() -> None:
    async with serve() as (client, _):
        r = await client.post(
            "/translate_file", data=EN_DE, files={"file": ("a.txt", b"Hi.")}, headers={"Host": "evil.example"}
        )
        assert r.json()["translatedFileUrl"].startswith("http://evil.example/download_file/")  # no setting: as asked
    async with serve(public_url="https://mt.example.com/api/") as (client, _):
        r = await client.post(
            "/translate_file", data=EN_DE, files={"file": ("a.txt", b"Hi.")}, headers={"Host": "evil.example"}
        )
        url = r.json()["translatedFileUrl"]
        assert url.startswith("https://mt.example.com/api/download_file/"), url
    with pytest.raises(ValueError, match="public_url must be an http:// or https:// address"):
        IsolatedSettings(public_url="mt.example.com")


async def test_translated_files_expire_and_unknown_ones_are_404(tmp_path: Path) -> None:
    async with serve(files_dir=str(tmp_path), file_ttl_s=0.2) as (client, app):
        first = await upload(client, "a.txt", b"Hello.")
        url = first.json()["translatedFileUrl"]
        assert (await client.get(url)).status_code == 200
        time.sleep(0.3)
        gone = await client.get(url)
        assert gone.status_code == 404 and "kept for 0.2 s" in gone.json()["error"]
        (tmp_path / "not-ours" / "sub").mkdir(parents=True)  # files_dir may be shared: /tmp
        os.utime(tmp_path / "not-ours", (time.time() - 3600, time.time() - 3600))
        assert app.state.transduce.files.purge() == 1 and [p.name for p in tmp_path.iterdir()] == ["not-ours"]
        for path in ("/download_file/" + "0" * 32 + "/a.txt", "/download_file/../../etc/passwd", "/download_file/x/y"):
            assert (await client.get(path)).status_code == 404


async def test_the_store_of_translated_files_is_bounded_and_a_full_disk_is_a_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Translated files wait for their download for file_ttl_s, with no bound on their count or bytes: a client
    sending 2 MB files translated into their own language (stored as they came, no decoding) filled 40 MB in 1.7 s.
    Past max_stored_bytes or max_stored_files a file is a 503 with Retry-After (before the translation when the
    upload alone would not fit), and so is a full disk, where the translation was lost in a 500."""
    fake = FakeTranslator()
    async with serve(fake, files_dir=str(tmp_path), max_stored_bytes=100, max_stored_files=2) as (client, app):
        assert (await upload(client, "a.txt", b"One two three.")).status_code == 200
        alone = await upload(client, "z.txt", b"y" * 101)  # more than the store holds: waiting cannot help
        assert alone.status_code == 413 and "max_stored_bytes): split it" in alone.json()["error"], alone.text
        big = await upload(client, "b.txt", b"x" * 90)
        assert big.status_code == 503 and 0 < int(big.headers["Retry-After"]) <= 600
        assert big.json()["error"].startswith("server busy: translated files waiting to be downloaded fill the store")
        assert "100 bytes (max_stored_bytes)" in big.json()["error"]
        assert len(fake.calls) == 2  # the canary and a.txt: b.txt was refused before it was translated
        assert (await upload(client, "c.txt", b"Four.")).status_code == 200
        third = await upload(client, "d.txt", b"Five.")
        assert third.status_code == 503 and "2 (max_stored_files)" in third.json()["error"]
        store = app.state.transduce.files
        store.max_files = 0

        def no_space(self: Path, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(Path, "write_bytes", no_space)
        full = await upload(client, "e.txt", b"Six.")
        assert full.status_code == 503 and full.json() == {
            "error": "no disk space left for the translated file: retry later"
        }
        assert full.headers["Retry-After"] == "60"
        monkeypatch.setattr(tempfile.SpooledTemporaryFile, "rollover", partial(no_space, Path(), b""))
        spooled = await upload(client, "f.txt", b"Seven. " * 200_000)  # over 1 MB: the upload goes to the disk
        assert spooled.status_code == 503 and "no disk space left to receive the file" in spooled.json()["error"]
    assert sorted(len(list(folder.iterdir())) for folder in tmp_path.iterdir()) == [1, 1]  # a.txt and c.txt alone
    with pytest.raises(ValueError, match="must be >= 0"):
        IsolatedSettings(max_stored_files=-1)


def test_reading_documents_directly() -> None:
    doc = read_document("x.txt", "\ufeffOne.\r\nTwo.".encode())  # a BOM and Windows line ends
    assert doc.units == ["One.", "Two."] and doc.rebuild(["Eins.", "Zwei."]) == b"\xef\xbb\xbfEins.\r\nZwei."
    doc = read_document("x.md", b"# One\r\n\r\nTwo\r\nlines.\r\n\r\n```\r\ncode\r\n```\r\n")
    rebuilt = doc.rebuild(["Eins", "Zwei Zeilen."])  # one paragraph, wrapped again to its width: Windows line ends
    assert (
        doc.units == ["One", "Two lines."] and rebuilt == b"# Eins\r\n\r\nZwei\r\nZeilen.\r\n\r\n```\r\ncode\r\n```\r\n"
    )
    assert read_document("y.md", b"```\nonly code\n```").units == []  # nothing to translate: nothing sent


MASTODON = (
    '<p>Just released <a href="https://example.com/v2">version 2</a> of our app! Thanks <span class="h-card">'
    '<a href="https://mastodon.social/@alice" class="u-url mention">@<span>alice</span></a></span> '
    '<a href="https://mastodon.social/tags/release" class="mention hashtag" rel="tag">#<span>release</span></a></p>'
)
TABLE = "<table><tr><th>Name</th><th>Value</th></tr><tr><td>Speed</td><td>Fast car</td></tr></table>"


async def test_an_html_file_keeps_its_markup_and_is_served_inert() -> None:
    page = (
        f'<!DOCTYPE html><html><head><title>My post</title><script>alert("hi")</script></head><body>{MASTODON}{TABLE}'
    )
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "post.htm", (page + "</body></html>").encode()))
    assert got.headers["content-type"].startswith("text/html") and 'filename="post.de.htm"' in got.text + str(
        got.headers
    )
    # served from our origin: never sniffed, and an uploaded <script> never runs there
    assert (got.headers["x-content-type-options"], got.headers["content-security-policy"]) == ("nosniff", "sandbox")
    html = got.text
    assert html.startswith('<!DOCTYPE html><html><head><title>POST MY</title><script>alert("hi")</script></head>')
    assert '<a href="https://example.com/v2">2 VERSION</a>' in html  # the link's text translated inside the sentence
    assert '<a href="https://mastodon.social/@alice" class="u-url mention">@<span>alice</span></a>' in html
    assert '<a href="https://mastodon.social/tags/release" class="mention hashtag" rel="tag">#<span>release' in html
    assert "<tr><th>NAME</th><th>VALUE</th></tr><tr><td>SPEED</td><td>CAR FAST</td></tr>" in html
    sent = " ".join(fake.translated[1:])
    assert "alice" not in sent and "alert" not in sent and "href" not in sent and "Fast car" in sent


MD = (
    "# Build it\n\n"
    'Run `make build` to compile, then read [the manual](https://example.com/docs "Docs") or\n'
    "<https://example.com/faq> for more. Press <kbd>Ctrl</kbd> and see ![a cat](cat.png) at https://x.org/a.\n\n"
    "- An item that wraps\n  onto a second line\n\n| Key | Use |\n|-----|-----|\n| `q` | Quit now |\n"
)


def blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """The block structure of ``markdown`` (CommonMark + tables) and the kinds of inline pieces in each block."""
    import markdown_it

    tokens = markdown_it.MarkdownIt("commonmark").enable("table").parse(markdown)
    inline = ("text", "softbreak")  # where lines are wrapped may change
    return [(t.type, sorted(c.type for c in t.children or [] if c.type not in inline)) for t in tokens]


async def test_markdown_sends_whole_paragraphs_and_keeps_code_urls_and_html_out_of_the_model() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "guide.md", MD.encode()))
    sent = fake.translated[1:]
    # the soft-wrapped paragraph went as one text, its kept pieces as placeholders
    assert "Run [1] to compile, then read [2] the manual [3] or [4] for more." in sent
    assert "An item that wraps onto a second line" in sent and "Quit now" in sent
    for kept in ("make", "example.com", "cat", "kbd", "x.org", "`q`", "|"):
        assert not [s for s in sent if kept in s], kept
    out = got.text
    for kept in ("`make build`", '](https://example.com/docs "Docs")', "<https://example.com/faq>", "<kbd>"):
        assert kept in out
    assert "![a cat](cat.png)" in out and "https://x.org/a" in out and "| `q` | NOW QUIT |" in out
    assert blocks(out) == blocks(MD)  # the same blocks, each with the same links, code, images and HTML


def test_markdown_placeholders_are_put_back_and_paragraphs_rewrapped() -> None:
    doc = read_document("a.md", MD.encode())
    assert doc.units[1] == "Run [1] to compile, then read [2] the manual [3] or [4] for more."
    german = {
        doc.units[1]: "Führe [1] aus, um zu kompilieren, und lies dann [2] das Handbuch [3] oder [4] für mehr.",
        "An item that wraps onto a second line": "Ein Eintrag, der auf eine zweite Zeile umbricht, und noch mehr",
    }
    out = doc.rebuild([german.get(u, u) for u in doc.units]).decode()
    assert out.split("\n")[2:9] == [
        "Führe `make build` aus, um zu kompilieren, und lies dann [das",  # the next word would pass the width
        'Handbuch](https://example.com/docs "Docs") oder <https://example.com/faq> für mehr. Press <kbd>Ctrl</kbd>',
        "and see ![a cat](cat.png) at https://x.org/a.",  # wrapped to the paragraph's width, never inside a piece
        "",
        "- Ein Eintrag, der",  # still one list item, wrapped to its 20 columns
        "  auf eine zweite",
        "  Zeile umbricht,",
    ]
    assert blocks(out) == blocks(MD)
    hazard = read_document("b.md", b"Intro text that is\nwrapped here.\n").rebuild(["- 1. # not a list"])
    assert hazard == b"\\- 1. # not a list\n"  # a translation that would open a list is escaped


@pytest.mark.parametrize(
    "matter",
    [
        '---\ntitle: "Hello world"\n---',
        '---\ntitle: "Hello world"\n...',
        '+++\ntitle = "Hello world"\ndate = 2020-01-01\n+++',
        '+++\n[params]\nauthor = "Jane Doe"\n+++',  # a TOML table first
        "---\n# Obsidian's\ndate created: 2023-01-01\ntags:\n  - travel\n---",  # a comment, a key with a space
        '+++\n\n"page title" = "Hi"\n+++',  # "+++" is never a thematic break: a blank line may come first
    ],
)
def test_markdown_front_matter_of_yaml_and_toml_is_never_sent(matter: str) -> None:
    """Hugo's TOML front matter (+++) and YAML closed by "..." were read as a paragraph: joined, rewrapped and
    translated. A thematic break that opens a document is no front matter, whatever line closes it."""
    doc = read_document("a.md", f"{matter}\n\nSome text here.\n".encode())
    assert doc.units == ["Some text here."]
    assert doc.rebuild(["Etwas Text hier."]).decode() == f"{matter}\n\nEtwas Text hier.\n"
    rule = read_document("b.md", b"---\n\nChapter one begins here.\n\n...\n\nThen the door opened.\n")
    assert rule.units[0] == "Chapter one begins here." and rule.units[-1] == "Then the door opened."
    for prose in ("Note: back up your files first.", "Set the width = 80 columns."):  # a blank line after "---"
        assert read_document("c.md", f"---\n\n{prose}\n\n---\n\nDone.\n".encode()).units == [prose, "Done."]
    heading = read_document("d.md", b"---\n# Chapter One\n\nIt was a dark night.\n\n---\n\nDone.\n")
    assert heading.units == ["Chapter One", "It was a dark night.", "Done."]  # a heading is no comment


def test_markdown_inline_html_comes_back_paired_and_code_is_never_sent() -> None:
    """Inline HTML's start and end tags go back around their element's translation (a model that reverses the
    words cannot cross them), as under format: "html"; an element never translated there (<code>, <kbd>) is one kept
    piece; an element that crosses a link and one nested too deep stay tags of their own, as written."""
    import html.parser

    text = (
        "Text <b>bold</b> here. The <code>ls -l</code> command lists <i>all</i> files.\n\n"
        'A [link <b>bold</b>](http://x) and <span class="a">x <em>y</em></span><br> <kbd>Ctrl</kbd>.\n\n'
        "A <b>cross [x</b>](u) and " + "<b>" * 40 + "deep" + "</b>" * 40 + " words.\n"
    )
    doc = read_document("inline.md", text.encode())
    assert doc.units[:2] == ["Text [1] bold [2] here.", "The [1] command lists [2] all [3] files."]  # ls unsent
    assert not [u for u in doc.units if "Ctrl" in u or "ls" in u]
    out = doc.rebuild([fake_translation(u) for u in doc.units]).decode()
    assert "<code>ls -l</code>" in out and "<kbd>Ctrl</kbd>" in out
    assert "<b>BOLD</b>" in out and "<i>ALL</i>" in out and "<em>Y</em>" in out, out

    class Balance(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[str] = []

        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag != "br":
                self.open.append(tag)

        def handle_endtag(self, tag: str) -> None:
            assert self.open and self.open.pop() == tag, (tag, out)

    checker = Balance()
    checker.feed("\n".join(out.split("\n\n")[:2]))
    assert checker.open == [], out  # every element closed where it opened, around its words (before: "</b> <b>")
    assert doc.rebuild(doc.units).decode() == text  # the crossing and the deep tags as written, no recursion error
    for odd in (
        "Press <kbd>Ctrl  \nAlt</kbd> now.\n",  # a hard break in an element kept whole: the element is not kept
        "Run <code>ls\\\n-l</code> now.\n",
        "A <b>x [1](#a</b>) y.\n",  # crossing a link kept whole ([1] has no letters): tags as written, once
    ):
        assert (
            read_document("odd.md", odd.encode()).rebuild(read_document("odd.md", odd.encode()).units) == odd.encode()
        )


def docx_with_link() -> bytes:
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    for before, link, after in (("See the ", "manual", " for details."), ("", "Only a link", "")):
        paragraph = document.add_paragraph(before)
        hyperlink = OxmlElement("w:hyperlink")
        hyperlink.set(
            qn("r:id"),
            paragraph.part.relate_to(f"https://example.com/{len(link)}", RELATIONSHIP_TYPE.HYPERLINK, is_external=True),
        )
        run, text = OxmlElement("w:r"), OxmlElement("w:t")
        text.text = link
        run.append(text)
        hyperlink.append(run)
        paragraph._p.append(hyperlink)
        if after:
            paragraph.add_run(after).italic = True
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


async def test_a_docx_hyperlink_is_translated_once_inside_its_sentence() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "links.docx", docx_with_link()))
    assert fake.translated[1:] == ["See the [1] manual [2] for details.", "Only a link"]
    first, second = docx.Document(io.BytesIO(got.content)).paragraphs
    assert first.text == "DETAILS. FOR MANUAL THE SEE"  # the link's text once, in the link (no "manual" twice)
    assert [(h.text, h.address) for h in first.hyperlinks] == [("MANUAL", "https://example.com/6")]
    assert [(h.text, h.address) for h in second.hyperlinks] == [("LINK A ONLY", "https://example.com/11")]
    doc = read_document("links.docx", docx_with_link())
    result = docx.Document(io.BytesIO(doc.rebuild(["Siehe das [1] Handbuch [2] für Details.", "Nur ein Link"])))
    parts = [(type(p).__name__, p.text) for p in result.paragraphs[0].iter_inner_content()]
    assert parts == [("Run", "Siehe das "), ("Hyperlink", "Handbuch"), ("Run", " für Details.")]
    assert result.paragraphs[0].runs[1].italic  # the text after the link keeps the formatting it had


async def test_auto_detects_the_language_once_for_the_whole_file() -> None:
    from transduce.service.detect import detector_for

    german = "Die Katze schläft auf dem Tisch. Wir arbeiten heute im Garten, weil das Wetter schön ist."
    assert detector_for(["de", "en"]).detect("Marketing", ["de", "en"]).language == "en"  # alone: misdetected
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        r = await upload(client, "notes.md", f"## Marketing\n\n{german}\n".encode(), source="auto", target="en")
        got = await fetch(client, r)
        same = await upload(
            client, "same.md", b"# Marketing\n\nThe cat sleeps on the table all day long.\n", source="auto", target="en"
        )
        unchanged = await fetch(client, same)
    assert r.json()["detectedLanguage"]["language"] == "de"
    assert got.text.startswith("## MARKETING\n\n")  # translated from German with the rest, not passed through
    assert same.json()["detectedLanguage"]["language"] == "en"  # already in the target: sent back as it was
    assert unchanged.text == "# Marketing\n\nThe cat sleeps on the table all day long.\n"
    assert len(fake.calls) == 2  # the canary and the German file, in one request


async def test_language_codes_in_any_case_are_the_servers_own() -> None:
    """As /translate reads them: ``AUTO`` is ``auto``, ``EN`` is ``en`` (both were refused as unknown pairs)."""
    german = "Die Katze schläft auf dem Tisch. Wir arbeiten heute im Garten, weil das Wetter schön ist."
    async with serve(FakeTranslator()) as (client, _):
        auto = await upload(client, "notes.txt", german.encode(), source="AUTO", target="EN")
        named = await upload(client, "notes.txt", b"Hello world.", source="En", target="DE")
        got = await fetch(client, named)
    assert auto.status_code == 200, auto.text
    assert auto.json()["detectedLanguage"]["language"] == "de"
    assert auto.json()["translatedFileUrl"].endswith("/notes.en.txt")  # named by the target as the server knows it
    assert got.text == "WORLD. HELLO"


async def test_a_source_that_is_the_target_sends_the_file_back_as_it_was() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        same = await upload(client, "notes.txt", b"Hello world.\n", source="en", target="en")
        unknown = await upload(client, "notes.txt", b"Hello world.\n", source="xx", target="xx")
        got = await fetch(client, same)
    assert same.status_code == 200, same.text
    assert got.content == b"Hello world.\n"
    assert unknown.status_code == 400 and "xx->xx is not supported" in unknown.json()["error"]
    assert len(fake.calls) == 1  # the canary only


class SlowTranslator(FakeTranslator):
    def translate(self, texts: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return super().translate(texts, **kwargs)


async def test_one_deadline_for_the_whole_file() -> None:
    fake = SlowTranslator()
    lines = "\n".join(f"Line {i}." for i in range(6))  # six requests of one line, 0.3 s each
    async with serve(fake, max_items=1, request_timeout_s=0.8) as (client, _):
        r = await upload(client, "slow.txt", lines.encode())
    assert r.status_code == 504 and "within 0.8 s (request_timeout_s)" in r.json()["error"]
    assert len(fake.calls) < 1 + 6


async def test_a_file_is_recorded_like_a_translate_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="transduce.access")
    async with serve() as (client, _):
        files, headers = {"file": ("a.txt", b"One.\nTwo three.")}, {"X-Request-ID": "file-1"}
        await fetch(client, await client.post("/translate_file", files=files, data=EN_DE, headers=headers))
        latency = (await client.get("/latency")).json()
        metrics = (await client.get("/metrics")).text
    assert latency["count"] == 1 and latency["total_ms"]["max"] > 0
    assert 'transduce_requests_total{status="200"} 1.0' in metrics and "transduce_characters_total 14.0" in metrics
    line = [r for r in caplog.records if r.name == "transduce.access"]
    assert [r.getMessage() for r in line] == ["translate_file 200"]
    assert {k: line[0].fields[k] for k in ("request_id", "path", "n_items", "n_chars")} == {  # type: ignore[attr-defined]
        "request_id": "file-1",
        "path": "/translate_file",
        "n_items": 2,
        "n_chars": 14,
    }


async def test_an_upload_is_counted_while_it_is_read() -> None:
    head = (
        b'--B\r\nContent-Disposition: form-data; name="source"\r\n\r\nen\r\n--B\r\nContent-Disposition: form-data; '
        b'name="target"\r\n\r\nde\r\n--B\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
    )
    read: list[int] = []

    async def chunks(n: int, pause_s: float = 0.0) -> AsyncIterator[bytes]:  # chunked: no content-length
        yield head
        for i in range(n):
            await asyncio.sleep(pause_s)
            read.append(i)
            yield b"Hi there. " * 1000
        yield b"\r\n--B--\r\n"

    multipart = {"content-type": "multipart/form-data; boundary=B"}
    async with serve(max_file_bytes=30_000, max_file_chars=10**6, request_read_timeout_s=0.3) as (client, _):
        r = await client.post("/translate_file", content=chunks(50), headers=multipart)
        assert r.status_code == 413 and r.headers["connection"] == "close", r.text
        assert r.json()["error"].startswith("upload exceeds the limit of 30000 bytes (max_file_bytes")
        assert len(read) == 5  # refused at 50,000 bytes (> 30,000 + 16,384), the other 45 chunks never read
        read.clear()
        declared = {**multipart, "content-length": str(len(head) + 50 * 10_000 + 9)}
        r = await client.post("/translate_file", content=chunks(50), headers=declared)
        assert r.status_code == 413 and not read  # its Content-Length said so: refused before a byte was read
        ok = await client.post("/translate_file", content=chunks(3), headers=multipart)
        assert ok.status_code == 200, ok.text  # a 30,000-byte file is within the limit
        read.clear()
        r = await client.post("/translate_file", content=chunks(3, pause_s=1.0), headers=multipart)
        assert r.status_code == 408 and "request_read_timeout_s" in r.json()["error"] and not read[1:]


async def test_files_in_work_at_once_are_bounded() -> None:
    """A file's parts take up to 1 KB of memory per character while it is translated (160 MB for 200,000 characters
    of one-word table cells), with no bound on how many files were in work at once: past max_file_jobs a file is a
    503 with Retry-After, and the room is given back however a file ends."""
    fake, gate = FakeTranslator(), Gate()
    async with serve(fake, gate=gate, max_file_jobs=1, api_keys="k") as (client, app):
        gate.hold()
        first = asyncio.create_task(upload(client, "a.txt", b"Held.", api_key="k"))
        await gate.wait_entered()
        assert (await upload(client, "x.txt", b"No key.")).status_code == 401  # the key first: no slot for it
        busy = await upload(client, "b.txt", b"Refused.", api_key="k")
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "5"
        assert busy.json() == {
            "error": "server busy: the limit of 1 files translated at once (max_file_jobs) is reached, retry later"
        }
        gate.release()
        assert (await first).status_code == 200
        assert (await upload(client, "c.txt", b"", source="xx", api_key="k")).status_code == 400  # freed again
        assert (await upload(client, "d.txt", b"Next.", api_key="k")).status_code == 200
        assert app.state.transduce.file_jobs == 0
    assert "Refused." not in fake.translated


async def test_hanging_up_stops_the_file() -> None:
    fake, gate = FakeTranslator(), Gate()
    request = httpx.Request("POST", "http://test/translate_file", data=EN_DE, files={"file": ("a.txt", b"A.\nB.\nC.")})
    body, hung_up, sent = request.read(), asyncio.Event(), []
    messages: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if messages:
            return messages.pop()
        await hung_up.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(k.lower().encode(), v.encode()) for k, v in request.headers.items()]
    scope: Scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST"}
    scope.update(scheme="http", path="/translate_file", raw_path=b"/translate_file", query_string=b"", root_path="")
    scope.update(headers=headers, client=("127.0.0.1", 1), server=("test", 80))
    async with serve(fake, gate=gate, max_items=1) as (_, app):
        gate.hold()
        task = asyncio.create_task(app(scope, receive, send))
        await gate.wait_entered()  # the first line is being translated
        hung_up.set()
        await asyncio.wait_for(task, 5)
        gate.release()
        metrics = app.state.transduce.metrics.requests.labels(status="499")._value.get()
    assert sent[0]["status"] == 499 and metrics == 1
    assert fake.translated[1:] == ["A."]  # the other lines were never queued


async def test_a_byte_order_mark_comes_back_and_a_docx_part_is_counted_whatever_its_name() -> None:
    async with serve() as (client, _):
        r = await upload(client, "notes.txt", b"\xef\xbb\xbfHello world.\n")
        got = await fetch(client, r)
        assert got.content == b"\xef\xbb\xbfWORLD. HELLO\n"
        body = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>" * 70_000  # 280,000 elements, in a part not named .xml
        bomb = _docx_with_main_part("word/document.bin", body)
        started = time.monotonic()
        refused = await upload(client, "bomb.docx", bomb)
    assert refused.status_code == 413 and "XML elements" in refused.json()["error"], refused.text
    assert time.monotonic() - started < 10
    picture = _docx_with_main_part("word/document.xml", b"<w:p><w:r><w:t>Hello.</w:t></w:r></w:p>", svg=210_000)
    async with serve() as (client, _):
        r = await upload(client, "drawing.docx", picture)  # python-docx never parses a picture
    assert r.status_code == 200, r.text


def _docx_with_main_part(part: str, body: bytes, svg: int = 0) -> bytes:
    import io
    import zipfile

    w = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    types = (
        b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        b'<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        b'<Override PartName="/' + part.encode() + b'" ContentType="application/vnd.openxmlformats-officedocument.'
        b'wordprocessingml.document.main+xml"/><Default Extension="svg" ContentType="image/svg+xml"/></Types>'
    )
    rels = (
        b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        b'officeDocument" Target="' + part.encode() + b'"/></Relationships>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", types)
        z.writestr("_rels/.rels", rels)
        z.writestr(part, b"<w:document " + w + b"><w:body>" + body + b"</w:body></w:document>")
        if svg:  # a picture of that many elements
            z.writestr("word/media/image1.svg", b'<svg xmlns="http://www.w3.org/2000/svg">' + b"<g/>" * svg + b"</svg>")
    return out.getvalue()


def test_html_files_keep_an_xml_prolog_a_pre_blank_line_and_declare_utf8() -> None:
    xhtml = b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html><body><p>One.</p></body></html>'
    doc = read_document("x.xhtml.html", xhtml)  # was read as a fragment: doctype, html and body lost
    assert doc.rebuild(["Eins."]).startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html>')
    doc = read_document("x.html", b"<pre>\n\nkept</pre><p>One.</p>")  # one blank line fewer before
    assert doc.rebuild(["Eins."]) == b"<pre>\n\nkept</pre><p>Eins.</p>"
    ascii_1252 = (
        b'<?xml version="1.0" encoding="ISO-8859-1"?>\n<!DOCTYPE html><html><head><meta http-equiv="Content-Type" '
        b'content="text/html; charset=windows-1252"><meta name="description" content="Set charset=latin1">'
        b'<meta data-charset="latin1"></head><body><p>One.</p><script>"<meta charset=x>"</script></body></html>'
    )
    rebuilt = read_document("x.html", ascii_1252).rebuild(["Über."])  # written as UTF-8, so declared so
    assert rebuilt.startswith(b'<?xml version="1.0" encoding="utf-8"?>') and b"charset=utf-8" in rebuilt
    for untouched in (b'content="Set charset=latin1"', b'data-charset="latin1"', b'"<meta charset=x>"'):
        assert untouched in rebuilt
    doc = read_document("x.html", b'<pre-x translate="no">\n\nkept</pre-x><p>One.</p>')  # not a <pre>
    assert doc.rebuild(["Eins."]) == b'<pre-x translate="no">\n\nkept</pre-x><p>Eins.</p>'
    started = time.monotonic()  # a regex over the page took time quadratic in its "<meta " strings
    read_document("x.html", b"<p>One.</p><script>" + b"<meta " * 40_000 + b"</script>").rebuild(["Eins."])
    assert time.monotonic() - started < 2


def test_markdown_keeps_the_line_end_most_of_its_lines_have() -> None:
    one_crlf = b"# One\n\nTwo.\r\n\nThree.\n"  # every line became CRLF
    assert read_document("x.md", one_crlf).rebuild(["Eins", "Zwei.", "Drei."]) == b"# Eins\n\nZwei.\n\nDrei.\n"
    classic_mac = b"# One\r\rTwo.\r"  # read as one line: the heading took the paragraph
    doc = read_document("x.md", classic_mac)
    assert doc.units == ["One", "Two."] and doc.rebuild(["Eins", "Zwei."]) == b"# Eins\r\rZwei.\r"
