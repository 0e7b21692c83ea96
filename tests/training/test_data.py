"""Corpus builder tests, offline: cleaning, Ding lines, .mo catalogs, Bible pairing and the chapter split."""

from __future__ import annotations

import json
import sqlite3
import struct
from collections import Counter
from pathlib import Path

from training.data import bible, gettext_mo
from training.data.build import hash_split
from training.data.clean import Pair, clean_pairs, normalize
from training.data.ding import parse_line, strip_annotations


def test_normalize_and_filters() -> None:
    assert normalize("  a\u0301b \t c\x00d ") == "áb c d"
    removed: Counter[str] = Counter()
    pairs = [Pair("x", "Hello", "Hallo"), Pair("x", "Hello", "Hallo"), Pair("x", "", "a"), Pair("x", "123", "123"),
             Pair("x", "same", "same"), Pair("x", "a" * 13, "b" * 60), Pair("x", "w " * 300, "v")]
    kept = list(clean_pairs(pairs, removed))
    assert kept == [Pair("x", "Hello", "Hallo")]
    assert removed == {"duplicate": 1, "empty": 1, "no_letters": 1, "identical": 1, "length_ratio": 1,
                       "too_long": 1}


def test_ding_lines() -> None:
    line = "Aal {m} [cook.] | Aal blau; blauer Aal :: Eel | Eel au bleu; Eel steamed\n"
    assert list(parse_line(line)) == [("Aal", "Eel"), ("Aal blau", "Eel au bleu"), ("blauer Aal", "Eel steamed")]
    assert list(parse_line("# comment :: x")) == []
    assert list(parse_line("a | b :: only one")) == []
    assert strip_annotations("Haus {n} <Hs.> (Gebäude) /abbr/") == "Haus"


def write_mo(path: Path, messages: dict[str, str]) -> None:
    """A minimal GNU .mo file (header entry included)."""
    items = sorted({"": "Content-Type: text/plain; charset=UTF-8\n", **messages}.items())
    ids = b"".join(k.encode() + b"\0" for k, _ in items)
    strs = b"".join(v.encode() + b"\0" for _, v in items)
    n = len(items)
    table_start = 28
    ids_start = table_start + 16 * n
    strs_start = ids_start + len(ids)
    offsets, pos = [], 0
    for k, _ in items:
        offsets.append((len(k.encode()), ids_start + pos))
        pos += len(k.encode()) + 1
    soffsets, pos = [], 0
    for _, v in items:
        soffsets.append((len(v.encode()), strs_start + pos))
        pos += len(v.encode()) + 1
    header = struct.pack("<7I", 0x950412DE, 0, n, table_start, table_start + 8 * n, 0, 0)
    body = b"".join(struct.pack("<2I", *o) for o in offsets) + b"".join(struct.pack("<2I", *o) for o in soffsets)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + body + ids + strs)


def test_mo_catalogs(tmp_path: Path) -> None:
    mo = tmp_path / "locale/de/LC_MESSAGES/app.mo"
    write_mo(mo, {"_Open File": "Datei _öffnen", "%s": "%s", "translator-credits": "Hans", "Same": "Same",
                  "Save the &document?": "Das &Dokument speichern?"})
    assert sorted(gettext_mo.read_mo(mo)) == sorted([("%s", "%s"), ("Same", "Same"), ("_Open File", "Datei _öffnen"),
                                                     ("translator-credits", "Hans"),
                                                     ("Save the &document?", "Das &Dokument speichern?")])
    got = sorted((p.en, p.de) for p in gettext_mo.pairs(tmp_path, packages=(), system_locale=tmp_path / "locale"))
    assert got == [("Open File", "Datei öffnen"), ("Save the document?", "Das Dokument speichern?")]


def test_bible_pairs_follow_the_chapter_split(tmp_path: Path) -> None:
    db = tmp_path / "bible.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE bible (id INTEGER, bbName TEXT, bNumber INTEGER, cNumber INTEGER, vNumber INTEGER, "
                "vText TEXT)")
    for code in bible.EDITIONS:
        for book, chapter in ((1, 1), (1, 2), (1, 3), (2, 1)):
            con.execute("INSERT INTO bible VALUES (0, ?, ?, ?, 1, ?)", (code, book, chapter,
                                                                       f"{code} text {book}:{chapter} God`s [word]"))
    con.commit()
    con.close()
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"dev": [[1, 2]], "test": [[1, 3]], "holdout": [[2, 1]]}))
    pairs = list(bible.read_db(db, bible.load_split(split_file)))
    assert len(pairs) == 3 * 3 * 2  # 3 chapters left x 3 English x 2 German editions
    assert {p.split for p in pairs} == {"train", "dev", "test"}
    assert not any("2:1" in p.en or "2:1" in p.de for p in pairs)  # the holdout chapter is never read out
    assert all(p.split == "dev" for p in pairs if "1:2" in p.en)
    assert pairs[0].en == "k text 1:1 God's word"


def test_shared_split_file_is_used_and_holdout_is_separate() -> None:
    split = bible.load_split()
    assert {"dev", "test", "holdout"} == set(split.values())
    assert hash_split("some text") == hash_split("some text")
    counts = Counter(hash_split(f"sentence {i}") for i in range(20000))
    assert 100 < counts["dev"] < 300 and 100 < counts["test"] < 300


def test_debian_descriptions_align_by_package_and_md5() -> None:
    from training.data.debian_desc import align, parse_index

    en = parse_index("Package: foo\nDescription-md5: 1\nDescription-en: a tool\n First para.\n .\n Second para.\n\n"
                     "Package: bar\nDescription-md5: 2\nDescription-en: other\n", "en")
    de = parse_index("Package: foo\nDescription-md5: 1\nDescription-de: ein Werkzeug\n Erster Absatz.\n .\n"
                     " Zweiter Absatz.\n\nPackage: baz\nDescription-md5: 3\nDescription-de: fehlt\n", "de")
    assert en[("foo", "1")] == ["a tool", "First para.", "Second para."]
    assert list(align(en, de)) == [("a tool", "ein Werkzeug"), ("First para.", "Erster Absatz."),
                                   ("Second para.", "Zweiter Absatz.")]
