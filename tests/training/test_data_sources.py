"""Parsers of the sources added for issue 13, on small fixtures built in the test (offline): Tatoeba, Multi30k, WMT,
LibreOffice help, GNOME help, Debian documentation .po, auf-deutsch."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

from transduce.training.data import auf_deutsch, debian_doc, gnome_help, libreoffice_help, multi30k, tatoeba, wmt
from transduce.training.data.gitrepo import Repo
from transduce.training.data.po import parse_po, strip_markup


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def test_tatoeba_keeps_long_english_sides_and_reserves_short_ones(tmp_path: Path) -> None:
    lines = [
        "Hi.\tHallo!",
        "I'm hungry.\tIch habe Hunger.",
        "I think that I am very hungry.\tIch glaube, ich habe großen Hunger.\tCC-BY 2.0 (France) Attribution: x",
        "Exactly twenty-four char\tGenau vierundzwanzig",  # 24 characters: reserved
        "Exactly twenty-five chars\tGenau fünfundzwanzig",  # 25 characters: training material
        "malformed line without a tab",
    ]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(tatoeba.MEMBER, "\n".join(lines) + "\n")
    write(tmp_path / "repo" / tatoeba.ZIP, buffer.getvalue())
    repo = Repo("tatoeba", tmp_path / "repo")
    meta: dict[str, object] = {}
    got = [(p.origin, p.en, p.de) for p in tatoeba.pairs(tmp_path, meta, repos={"tatoeba": repo})]
    assert got == [
        ("tatoeba", "I think that I am very hungry.", "Ich glaube, ich habe großen Hunger."),
        ("tatoeba", "Exactly twenty-five chars", "Genau fünfundzwanzig"),
    ]
    assert tatoeba.short_pairs(repo) == [
        ("Hi.", "Hallo!"),
        ("I'm hungry.", "Ich habe Hunger."),
        ("Exactly twenty-four char", "Genau vierundzwanzig"),
    ]
    assert meta["lines"] == 5 and meta["reserved_short_pairs"] == 3
    empty: dict[str, object] = {}
    assert list(tatoeba.pairs(tmp_path, empty, repos={"tatoeba": Repo("tatoeba", tmp_path)})) == []
    assert "not found" in str(empty["skipped"])


def test_multi30k_reads_train_only_and_lists_the_test_captions(tmp_path: Path) -> None:
    root = tmp_path / "multi30k"
    raw = root / "data/task1/raw"
    write(raw / "train.en.gz", gzip.compress(b"A dog runs.\nTwo men\xe2\x80\xa8talk.\n"))  # U+2028 is no line break
    write(raw / "train.de.gz", gzip.compress("Ein Hund rennt.\nZwei Männer reden.\n".encode()))
    write(raw / "val.en.gz", gzip.compress(b"A val caption.\n"))
    write(raw / "test_2016_flickr.en.gz", gzip.compress(b"A test caption.\n"))
    write(raw / "test_2016_flickr.de.gz", gzip.compress(b"Eine Testbeschreibung.\n"))
    write(root / "data/task2/raw/test_2016.1.de.gz", gzip.compress(b"Ein Bild.\n"))
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w:gz") as tf:
        data = b"A tarball caption.\n"
        info = tarfile.TarInfo("./test_2018_flickr.en")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    write(root / "data/task1/multi30k_test_sets_x.tar.gz", tar.getvalue())
    repo = Repo("multi30k", root)
    got = [(p.en, p.de) for p in multi30k.pairs(tmp_path, {}, repos={"multi30k": repo})]
    assert got == [("A dog runs.", "Ein Hund rennt."), ("Two men\u2028talk.", "Zwei Männer reden.")]
    texts, files = multi30k.reserved_texts(repo)
    assert sorted(texts["en"]) == ["A tarball caption.", "A test caption."]
    assert sorted(texts["de"]) == ["Ein Bild.", "Eine Testbeschreibung."]
    assert len(files) == 4 and not any("val" in f or "train" in f for f in files)


def make_wmt(root: Path) -> None:
    """A WMT 2021-style repository (en-de and de-en) and a WMT 2024-style one (en-de, canary line)."""
    y21 = root / "wmt21/txt"
    write(y21 / "sources/newstest2021.en-de.src.en", "Hello world.\nGood news today.\n")
    write(y21 / "references/newstest2021.en-de.ref.A.de", "Hallo Welt.\nGute Nachrichten heute.\n")
    write(y21 / "references/newstest2021.en-de.ref.B.de", "Hallo, Welt.\nHeute gute Nachrichten.\n")
    write(y21 / "sources/newstest2021.de-en.src.de", "Guten Morgen.\n")
    write(y21 / "references/newstest2021.de-en.ref.A.en", "Good morning.\n")
    write(y21 / "system-outputs/newstest2021.en-de.hyp.Online-A.de", "Hallo Welt!\nGute Nachricht heute.\n")
    write(y21 / "system-outputs/newstest2021.en-de.hyp.Broken.de", "only one line\n")  # misaligned: skipped
    write(y21 / "system-outputs/newstest2021.cs-en.hyp.Other.en", "not our pair\n")
    y24 = root / "wmt24/txt"
    write(y24 / "sources/en-de.txt", "CANARY GUID 123\nA new gallery opens.\n")
    write(y24 / "references/en-de.refA.txt", "CANARY GUID 123\nEine neue Galerie öffnet.\n")
    write(y24 / "system-outputs/en-de/GPT-4.txt", "CANARY GUID 123\nEine neue Galerie eröffnet.\n")


def test_wmt_references_and_system_outputs(tmp_path: Path) -> None:
    make_wmt(tmp_path)
    repos = {y: Repo(y, tmp_path / y) for y in ("wmt21", "wmt24")}
    meta: dict[str, object] = {}
    refs = [(p.origin, p.en, p.de, p.group) for p in wmt.pairs(tmp_path, meta, repos=repos)]
    assert refs == [
        ("wmt", "Good morning.", "Guten Morgen.", "Guten Morgen."),  # de-en: German is the original
        ("wmt", "Hello world.", "Hallo Welt.", "Hello world."),
        ("wmt", "Good news today.", "Gute Nachrichten heute.", "Good news today."),
        ("wmt", "Hello world.", "Hallo, Welt.", "Hello world."),
        ("wmt", "Good news today.", "Heute gute Nachrichten.", "Good news today."),
        ("wmt", "A new gallery opens.", "Eine neue Galerie öffnet.", "A new gallery opens."),
    ]
    assert meta["years_missing"] == ["wmt22", "wmt23"] and meta["canary_lines_skipped"] == 1
    sys_meta: dict[str, object] = {}
    hyps = [(p.origin, p.en, p.de) for p in wmt.system_pairs(tmp_path, sys_meta, repos=repos)]
    assert hyps == [
        ("wmt-sys", "Hello world.", "Hallo Welt!"),
        ("wmt-sys", "Good news today.", "Gute Nachricht heute."),
        ("wmt-sys", "A new gallery opens.", "Eine neue Galerie eröffnet."),
    ]
    assert sys_meta["systems"] == 2 and "Broken" in str(sys_meta["misaligned"])
    assert wmt.system_name(wmt.classify("txt/system-outputs/en-de/GPT-4.txt")) == "GPT-4"  # type: ignore[arg-type]


LO_EN = """<html><body><script>var x = "<p id='par_id9'>no</p>";</script>
<h1 id="hd_id1" dir="auto">Fields</h1>
<p id="par_id2" class="paragraph">Choose <span class="menuitem">Insert - Field</span>.</p>
<table><tr><td><p id="par_id3">Lists the field types.<br/>More text.</p></td></tr></table>
<p id="par_id4">Shown twice.</p><p id="par_id4">Shown twice.</p>
<p id="bm_id5">bookmark</p>
<p id="par_id6">Only in English.</p>
</body></html>"""
LO_DE = """<html><body>
<h1 id="hd_id1" dir="auto">Felder</h1>
<p id="par_id2" class="paragraph">Wählen Sie <span class="menuitem">Einfügen - Feld</span>.</p>
<table><tr><td><p id="par_id3">Listet die Feldtypen auf.<br/>Mehr Text.</p></td></tr></table>
<p id="par_id4">Einmal.</p>
<p id="bm_id5">Lesezeichen</p>
</body></html>"""


def test_libreoffice_help_aligns_by_element_id() -> None:
    assert libreoffice_help.paragraphs(LO_EN)[("par_id4", 2)] == "Shown twice."
    assert list(libreoffice_help.align_page(LO_EN, LO_DE)) == [
        ("Fields", "Felder"),
        ("Choose Insert - Field.", "Wählen Sie Einfügen - Feld."),
        ("Lists the field types. More text.", "Listet die Feldtypen auf. Mehr Text."),
    ]  # par_id4 occurs twice in English, once in German: left out


PAGE = """<page xmlns="http://projectmallard.org/1.0/" type="topic" id="keyboard">
  <info><desc>{desc}</desc><credit type="author"><name>Shaun</name></credit>{extra}
    <license><p>Creative Commons Share Alike 3.0</p></license></info>
  <title>{title}</title>
  <p>{p1} <keyseq><key>Ctrl</key><key>{key}</key></keyseq>.</p>
  <p>See <link xref="other"/>.</p>
  <table><tr><td><p>{cell}</p></td></tr></table>
</page>"""


def test_gnome_help_pairs_elements_in_order() -> None:
    en = PAGE.format(desc="Use shortcuts.", extra="", title="Keyboard", p1="Press", key="Q", cell="Quit")
    credit = '<credit type="translator"><name>Christian</name><email>c@x</email></credit>'
    de = PAGE.format(desc="Tastenkürzel.", extra=credit, title="Tastatur", p1="Drücken Sie", key="Q", cell="Beenden")
    assert list(gnome_help.align_page(en, de) or []) == [
        ("Use shortcuts.", "Tastenkürzel."),
        ("Keyboard", "Tastatur"),
        ("Press Ctrl+Q.", "Drücken Sie Ctrl+Q."),
        ("Quit", "Beenden"),
    ]  # the paragraph with an empty <link> and the licence are left out
    assert gnome_help.align_page(en, de.replace("<title>Tastatur</title>", "")) is None  # counts differ
    assert gnome_help.segments("<page><p>unclosed</page>") == []


PO = r"""# German translation
msgid ""
msgstr "Content-Type: text/plain; charset=UTF-8\n"

#. type: Content of: <refentry><refsect1><para>
#: apt.8.xml:10
msgid ""
"<command>apt</command> provides a high-level &lt;commandline&gt; "
"interface."
msgstr ""
"<command>apt</command> stellt eine &lt;Befehlszeilen&gt;-Schnittstelle "
"bereit."

#, fuzzy
msgid "Old text"
msgstr "Alter Text"

msgctxt "menu"
msgid "File"
msgid_plural "Files"
msgstr[0] "Datei"
msgstr[1] "Dateien"

msgid "See &debian; for details."
msgstr "Siehe &debian; für Details."

msgid "<screen>apt update</screen>"
msgstr "<screen>apt update</screen>"

msgid "Untranslated"
msgstr ""

#~ msgid "Obsolete"
#~ msgstr "Veraltet"
"""


def test_po_parser_and_markup() -> None:
    entries = list(parse_po(PO))
    assert [(e.msgctxt, e.msgid[:14], e.msgstr[:14], e.fuzzy, e.plural) for e in entries] == [
        (None, "<command>apt</", "<command>apt</", False, False),
        (None, "Old text", "Alter Text", True, False),
        ("menu", "File", "Datei", False, True),
        (None, "See &debian; f", "Siehe &debian;", False, False),
        (None, "<screen>apt up", "<screen>apt up", False, False),
        (None, "Untranslated", "", False, False),
    ]
    assert strip_markup(entries[0].msgid) == "apt provides a high-level <commandline> interface."
    assert strip_markup(entries[3].msgid) is None  # an entity defined elsewhere
    assert strip_markup(entries[4].msgid) is None  # code
    assert strip_markup("See B<dpkg>(1) and I<file> E<lt>nameE<gt>, B<< --force >>.", pod=True) == (
        "See dpkg(1) and file <name>, --force."
    )
    assert strip_markup("Read <ulink url='x'/> now.") is None


def test_debian_doc_reads_documentation_catalogs_from_a_source_tarball(tmp_path: Path) -> None:
    tarball = tmp_path / "apt_1.0.tar.xz"
    with tarfile.open(tarball, "w:xz") as tf:
        for name in ("apt-1.0/doc/po/de.po", "apt-1.0/po/de.po", "apt-1.0/doc/po/fr.po"):
            data = PO.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    got = list(debian_doc.read_tarball(tarball, debian_doc.PACKAGES["apt"]))
    assert [(n, en) for n, en, _ in got] == [
        ("apt-1.0/doc/po/de.po", "apt provides a high-level <commandline> interface."),
        ("apt-1.0/doc/po/de.po", "File"),
    ]
    assert "bookworm" in str(debian_doc.codename(write(tmp_path / "os", 'ID=debian\nVERSION_CODENAME="bookworm"\n')))
    assert debian_doc.codename(write(tmp_path / "os2", "ID=ubuntu\nVERSION_CODENAME=noble\n")) is None
    assert "Dir::State::Lists=" + str(tmp_path / "apt" / "lists") in debian_doc.apt_options(tmp_path)


def test_auf_deutsch_reads_every_en_de_object_of_the_wheel(tmp_path: Path) -> None:
    pack = {
        "pack_id": "greetings",
        "phrases": [
            {"de": "Guten Morgen!", "en": "Good morning!", "examples": [{"de": "Wie geht's?", "en": "How are you?"}]},
            {"de": "zwölf", "en": None},
        ],
    }
    with zipfile.ZipFile(tmp_path / "auf_deutsch-0.1.1-py3-none-any.whl", "w") as zf:
        zf.writestr("auf_deutsch/content/packs/greetings.json", json.dumps(pack))
        zf.writestr("auf_deutsch/content/curriculum.json", json.dumps({"levels": [{"title": "A1"}]}))
        zf.writestr("auf_deutsch/app.py", "")
    meta: dict[str, object] = {}
    got = [(p.origin, p.en, p.de) for p in auf_deutsch.pairs(tmp_path, meta)]  # the wheel is there: no download
    assert got == [("auf-deutsch", "Good morning!", "Guten Morgen!"), ("auf-deutsch", "How are you?", "Wie geht's?")]
    assert meta == {"package": "auf_deutsch-0.1.1-py3-none-any.whl", "json_files": 2}
