"""transduce eval on the tiny model: multi-reference grouping, per-origin rows, CLI errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from transduce.cli import main
from transduce.training.evaluate import evaluate, read_tsv


def test_eval_groups_references_and_reports_per_origin(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tsv = tmp_path / "test.tsv"
    tsv.write_text(
        "origin\ten\tde\nbible\tThe cat sees the dog.\tDie Katze sieht den Hund.\n"
        "bible\tThe cat sees the dog.\tDie Katze erblickt den Hund.\n"
        "gettext\tOpen the file\tDatei öffnen\n"
    )
    assert len(read_tsv(tsv, "en", "de")) == 3
    results = evaluate(tiny_model_dir, tsv, source="en", target="de", beam_size=1, progress=False)
    by_origin = {r.origin: r for r in results}
    assert by_origin["all"].sentences == 2 and by_origin["bible"].sentences == 1  # one source, two references
    assert all(0.0 <= r.bleu <= 100.0 and 0.0 <= r.chrf <= 100.0 for r in results)
    assert (
        main(["eval", "--model", str(tiny_model_dir), "--tsv", str(tsv), "-s", "de", "-t", "en", "--beam-size", "1"])
        == 0
    )
    assert "| all | de->en | 3 |" in capsys.readouterr().out
    assert main(["eval", "--model", str(tiny_model_dir), "--tsv", str(tsv), "-s", "en", "-t", "fr"]) == 1
    assert "header must name" in capsys.readouterr().err


def test_a_ragged_row_a_bad_limit_and_json_over_the_test_set_are_refused_before_decoding(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tsv = tmp_path / "test.tsv"
    tsv.write_text("origin\ten\tde\nbible\tThe cat.\tDie Katze.\n\nbible\tThe dog.\n")
    with pytest.raises(ValueError, match="line 4 has 2 columns, the header 3"):  # not scored on 1 row of 2
        read_tsv(tsv, "en", "de")
    tsv.write_text("origin\ten\tde\nbible\tThe cat.\tDie Katze.\n\t\t\n \t \t \n")
    assert read_tsv(tsv, "en", "de") == [("bible", "The cat.", "Die Katze.")]  # rows of blanks are no pairs
    args = ["eval", "--model", str(tiny_model_dir), "--tsv", str(tsv), "-s", "en", "-t", "de", "--beam-size", "1"]
    assert main([*args, "--limit", "-1"]) == 2  # a bad option: 2, as in every command
    assert "--limit must be at least 1" in capsys.readouterr().err
    assert main([*args, "--json", str(tsv)]) == 1
    assert "would overwrite the input" in capsys.readouterr().err and tsv.read_text().startswith("origin")
    assert main([*args, "--json", str(tiny_model_dir / "manifest.json")]) == 1  # a file of the model
    assert "would overwrite the input" in capsys.readouterr().err
    (tmp_path / "adir").mkdir()
    assert main([*args, "--json", str(tmp_path / "adir")]) == 1
    assert "name a file in an existing directory" in capsys.readouterr().err
    assert main([*args, "--beam-size", "100000"]) == 2  # (it grew to 4.5 GB until killed)
    assert "--beam-size must be between 1 (greedy) and 64, got 100000" in capsys.readouterr().err
    tsv.write_text("\ufefforigin\tEN\tDe \nbible\tThe cat.\tDie Katze.\n")  # a byte-order mark, codes in capitals
    assert read_tsv(tsv, "en", "DE") == [("bible", "The cat.", "Die Katze.")]
    upper = ["eval", "--model", str(tiny_model_dir), "--tsv", str(tsv), "-s", "EN", "-t", "DE", "--beam-size", "1"]
    assert main(upper) == 0, capsys.readouterr().err  # (the pair EN->DE was refused once the model had loaded)


def test_a_model_spelling_a_code_in_capitals_is_evaluated_in_any_case(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose language is de-AT (import-marian keeps pt-BR): "-t de-at" and "-t DE-AT" are its de-AT (the codes
    were lowercased and then refused: "en->de-at is not supported (supported: en->de-AT)")."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    manifest = json.loads((model / "manifest.json").read_text())
    manifest["languages"] = manifest["model_config"]["languages"] = ["de-AT", "en"]
    manifest["pairs"], manifest["target_tag"], manifest["model_config"]["target_tag"] = [["en", "de-AT"]], "", ""
    (model / "manifest.json").write_text(json.dumps(manifest))
    tsv = tmp_path / "test.tsv"
    tsv.write_text("origin\ten\tde-at\nbible\tThe cat.\tDie Katze.\n")
    for target in ("de-at", "DE-AT", "de-AT"):
        assert main(["eval", "--model", str(model), "--tsv", str(tsv), "-s", "EN", "-t", target]) == 0
        assert "| all | en->de-AT | 1 |" in capsys.readouterr().out
    assert main(["eval", "--model", str(model), "--tsv", str(tsv), "-s", "de-AT", "-t", "en"]) == 1
    assert "de-AT->en is not supported (supported: en->de-AT)" in capsys.readouterr().err


def test_headerless_dev_sets_take_their_columns_from_the_file_name(tiny_model_dir: Path, tmp_path: Path) -> None:
    dev = tmp_path / "newstest2013.en-de.tsv"  # the format of shared/data/dev: English<TAB>German, no header
    dev.write_text("A house.\tEin Haus.\nThe dog.\tDer Hund.\n")
    rows = [("newstest2013", "A house.", "Ein Haus."), ("newstest2013", "The dog.", "Der Hund.")]
    assert read_tsv(dev, "en", "de") == rows
    assert read_tsv(dev, "de", "en")[1] == ("newstest2013", "Der Hund.", "The dog.")
    with pytest.raises(ValueError, match=r"end in \.en-fr\.tsv"):
        read_tsv(dev, "en", "fr")
    plain = tmp_path / "plain.tsv"
    plain.write_text("A house.\tEin Haus.\n")
    with pytest.raises(ValueError, match="header must name"):
        read_tsv(plain, "en", "de")
    results = evaluate(tiny_model_dir, dev, source="en", target="de", beam_size=1, progress=False)
    assert [(r.origin, r.sentences) for r in results] == [("all", 2)]  # each sentence counted once


def test_eval_scores_several_sets_in_one_run(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transduce.cli import main

    news = tmp_path / "newstest2013.en-de.tsv"
    news.write_text("A house.\tEin Haus.\nThe dog.\tDer Hund.\n")
    own = tmp_path / "dev.tsv"
    own.write_text("origin\ten\tde\ntatoeba\tI am here.\tIch bin hier.\nwmt\tThe news.\tDie Nachrichten.\n")
    args = ["eval", "--model", str(tiny_model_dir), "--tsv", str(news), "--tsv", str(own), "-s", "en", "-t", "de"]
    assert main([*args, "--beam-size", "1", "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    for row in ("| all (newstest2013.en-de.tsv) | en->de | 2 |", "| all (dev.tsv) | en->de | 2 |", "| tatoeba |"):
        assert row in out
    assert len(json.loads((tmp_path / "out.json").read_text())) == 4  # two sets, and dev.tsv's two origins


def test_every_set_is_read_before_any_is_translated_and_a_huge_cell_is_one_line(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad second --tsv threw away the first set's scores (minutes with a real model) after translating it; a
    cell over csv's field limit (131,072 characters) was a traceback."""
    import transduce.training.evaluate as evaluation

    good = tmp_path / "a.en-de.tsv"
    good.write_text("A house.\tEin Haus.\n")
    huge = tmp_path / "b.en-de.tsv"
    huge.write_text("x" * 140_000 + "\tEin Haus.\n")
    translated: list[object] = []

    def recorded(*args: object, **kwargs: object) -> list[object]:
        translated.append(args)
        return []

    monkeypatch.setattr(evaluation, "evaluate", recorded)
    model = ["eval", "--model", str(tiny_model_dir), "-s", "en", "-t", "de", "--tsv", str(good)]
    assert main([*model, "--tsv", str(tmp_path / "missing.tsv")]) == 1
    assert "missing.tsv" in capsys.readouterr().err and translated == []
    assert main([*model, "--tsv", str(huge)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"transduce eval: {huge} cannot be read as tab-separated text: field larger than")
    assert err.count("\n") == 1 and translated == []


def test_a_source_over_the_models_positions_is_translated_in_parts(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transduce.engine.translator import Translator

    translator = Translator(tiny_model_dir)
    long = ", ".join(["the cat sees the dog"] * 200) + "."  # far more pieces than the model's positions
    assert translator.count_tokens(long) > translator.max_source_tokens
    tsv = tmp_path / "long.en-de.tsv"
    tsv.write_text(f"{long}\tDie Katze sieht den Hund.\nThe dog.\tDer Hund.\n")
    results = evaluate(tiny_model_dir, tsv, source="en", target="de", beam_size=1, progress=True)
    assert [(r.origin, r.sentences) for r in results] == [("all", 2)]
    assert "1 source sentence(s) over the model's" in capsys.readouterr().err
