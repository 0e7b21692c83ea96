"""POST /translate_file and GET /download_file through the real app over the fake translator (which reverses and
upper-cases the words of each sentence): .txt, .md and .docx, limits, expiry, API keys."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest

from tests.service.harness import FakeTranslator, fake_translation, serve
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


async def test_a_docx_file_translates_body_and_table_paragraphs() -> None:
    fake = FakeTranslator()
    async with serve(fake) as (client, _):
        got = await fetch(client, await upload(client, "letter.docx", make_docx()))
    result = docx.Document(io.BytesIO(got.content))
    assert [p.text for p in result.paragraphs] == ["HERE. PARAGRAPH FIRST", "PLAIN AND BOLD"]
    assert result.paragraphs[1].runs[0].bold  # the paragraph keeps its first run's formatting
    table = result.tables[0]
    assert [table.cell(0, 0).text, table.cell(0, 1).text, table.cell(1, 0).text] == [
        "ONE CELL",
        "TWO CELL",
        "CELL MERGED",
    ]
    assert fake.translated.count("Merged cell") == 1  # a merged cell is translated once, not once per column


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


@pytest.mark.parametrize(
    ("name", "data", "status", "message"),
    [
        ("slides.pptx", b"x", 400, "not supported: send .txt, .md, .docx"),
        ("noext", b"x", 400, "not supported"),
        ("latin1.txt", "Grüße".encode("latin-1"), 400, "is not UTF-8 text"),
        ("broken.docx", b"PK\x03\x04 not a zip", 400, "not a readable .docx file"),
        ("big.txt", b"x" * 3001, 413, "exceeds the limit of 3000 bytes (max_file_bytes)"),
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
        r = await upload(client, "a.txt", b"Hi.", api_key="secret", target="fr")
        assert r.status_code == 400 and "en->fr is not supported" in r.json()["error"]


async def test_translated_files_expire_and_unknown_ones_are_404(tmp_path: Path) -> None:
    async with serve(files_dir=str(tmp_path), file_ttl_s=0.2) as (client, app):
        first = await upload(client, "a.txt", b"Hello.")
        url = first.json()["translatedFileUrl"]
        assert (await client.get(url)).status_code == 200
        time.sleep(0.3)
        gone = await client.get(url)
        assert gone.status_code == 404 and "kept for 0.2 s" in gone.json()["error"]
        assert app.state.transduce.files.purge() == 1 and not list(tmp_path.iterdir())
        for path in ("/download_file/" + "0" * 32 + "/a.txt", "/download_file/../../etc/passwd", "/download_file/x/y"):
            assert (await client.get(path)).status_code == 404


def test_reading_documents_directly() -> None:
    doc = read_document("x.txt", "\ufeffOne.\r\nTwo.".encode())  # a BOM and Windows line ends
    assert doc.units == ["One.", "Two."] and doc.rebuild(["Eins.", "Zwei."]) == b"Eins.\r\nZwei."
