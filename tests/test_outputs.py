"""No command destroys its input or a directory of other files, and damaged inputs are one-line errors: from a
read-only probe of the command-line tools (export, export-marian, import-marian, shortlist, eval, data, train)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from transduce.cli import main
from transduce.engine.manifest import is_stale
from transduce.engine.shortlist import ShortlistTable, load_table
from transduce.export.files import ONNX_EXPORT, replacing_dir
from transduce.paths import check_output, check_replaceable_dir


def test_check_output_refuses_an_input_or_a_directory_holding_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.pt").write_bytes(b"x")
    for out in (run / "model.pt", run, tmp_path):
        with pytest.raises(ValueError, match="would overwrite the input"):
            check_output(out, [None, run / "model.pt"])
    check_output(tmp_path / "other", [run / "model.pt", None])  # elsewhere: fine


def test_a_symlink_loop_as_an_output_is_one_line(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Path.resolve raises RuntimeError on a symlink loop (Python 3.11): it escaped the commands' handlers
    (export-marian, data build and train --export-fp16 still gave tracebacks after the first fix)."""
    from transduce.paths import check_file_target
    from transduce.training.cli import check_fp16_output

    loop = tmp_path / "a"
    loop.symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(loop)
    for check, named in (
        (lambda: check_output(loop, [tmp_path]), f"the output {loop}: "),
        (lambda: check_output(tmp_path / "out", [loop]), f"the input {loop}: "),  # the input that loops is named
        (lambda: check_file_target(loop, what="x"), f"x {loop}: "),
        (lambda: check_fp16_output(loop, tmp_path / "run"), f"--export-fp16 {loop}: "),
    ):
        with pytest.raises(ValueError, match="ymlink loop") as caught:
            check()
        assert str(caught.value).startswith(named), caught.value
    assert main(["export-marian", str(tiny_checkpoint), str(loop)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"transduce export-marian: the Marian export {loop}: ") and err.count("\n") == 1


def test_a_directory_of_other_files_is_never_replaced(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with (
        pytest.raises(ValueError, match="is not an earlier export .its manifest.json is missing or not one"),
        replacing_dir(mine, marker=ONNX_EXPORT),
    ):
        pytest.fail("never reached")
    assert (mine / "notes.txt").read_text() == "keep"
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(ValueError, match="is a file"):
        check_replaceable_dir(tmp_path / "afile", "manifest.json", what="export")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "manifest.json").write_text("{}")  # some other program's manifest
    with pytest.raises(ValueError, match="is not an earlier export"):
        check_replaceable_dir(earlier, "manifest.json", what="export", stamp=ONNX_EXPORT[1:])
    (earlier / "manifest.json").write_text('{"format": "transduce-onnx"}')
    with replacing_dir(earlier, marker=ONNX_EXPORT) as work:  # an earlier export is replaced as a whole
        (work / "manifest.json").write_text('{"new": 1}')
    assert json.loads((earlier / "manifest.json").read_text()) == {"new": 1}


def test_export_and_export_marian_never_delete_their_checkpoint_or_other_files(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "model.pt").write_bytes(tiny_checkpoint.read_bytes())
    (victim / "notes.txt").write_text("keep")
    assert main(["export-marian", str(victim / "model.pt"), str(victim)]) == 1
    assert "would overwrite the input" in capsys.readouterr().err
    assert main(["export", str(victim / "model.pt"), str(victim), "--no-shortlist"]) == 1
    assert "would overwrite the input" in capsys.readouterr().err
    assert main(["export-marian", str(tiny_checkpoint), str(victim)]) == 1  # holds other files
    err = capsys.readouterr().err
    assert "holds files and is not an earlier Marian export" in err and len(_errors(err)) == 1
    (victim / "config.json").write_text('{"model_type": "marian"}')  # a model downloaded from elsewhere
    assert main(["export-marian", str(tiny_checkpoint), str(victim)]) == 1
    assert "is not an earlier Marian export" in capsys.readouterr().err
    (victim / "config.json").unlink()
    assert main(["export", str(victim / "model.pt"), str(victim), "--dtype", "int8"]) == 1  # before any export
    assert "would overwrite the input" in capsys.readouterr().err
    assert sorted(p.name for p in victim.iterdir()) == ["model.pt", "notes.txt"]
    assert main(["export", str(tiny_checkpoint), str(tmp_path / "x"), "--opset", "0"]) == 2  # a bad option
    err = capsys.readouterr().err
    assert _errors(err) == ["transduce export: opset must be 14 to 21 (those this export is verified with), got 0"]


def test_shortlist_output_on_its_checkpoint_is_refused_and_a_failed_write_keeps_the_old_table(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["shortlist", "--checkpoint", str(tmp_path), "--data", str(tmp_path)]) == 1
    assert "is a directory: name the checkpoint file (.pt) in it" in capsys.readouterr().err  # not "does not exist"
    assert main(["shortlist", "--checkpoint", str(tmp_path), "--data", str(tmp_path), "--per-piece", "0"]) == 2
    assert capsys.readouterr().err == "transduce shortlist: per_piece must be >= 1, got 0\n"  # a bad option: 2
    copy = tmp_path / "model.pt"
    copy.write_bytes(tiny_checkpoint.read_bytes())
    assert main(["shortlist", "--checkpoint", str(copy), "--data", str(tmp_path), "--out", str(copy)]) == 1
    assert "would overwrite the input" in capsys.readouterr().err and copy.read_bytes() == tiny_checkpoint.read_bytes()
    (tmp_path / "train.tsv").write_text("origin\ten\tde\n")
    assert (
        main(["shortlist", "--checkpoint", str(copy), "--data", str(tmp_path), "--out", str(tmp_path / "train.tsv")])
        == 1
    )
    assert "would overwrite the input" in capsys.readouterr().err
    (tmp_path / "train.tsv").unlink()
    table = ShortlistTable(8, {5: np.arange(2)}, {5: np.zeros(9, np.int64)}, {5: np.zeros(0, np.int32)})
    out = tmp_path / "table.npz"
    table.save(out)
    before = out.read_bytes()

    def half_written(f: object, **arrays: object) -> None:
        f.write(b"PK\x03\x04 partial")  # type: ignore[attr-defined]
        raise OSError(27, "File too large")

    monkeypatch.setattr(np, "savez_compressed", half_written)
    with pytest.raises(OSError, match="File too large"):
        table.save(out)
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "table.npz"]


def test_a_damaged_table_is_a_value_error(tmp_path: Path) -> None:
    empty, cut, scalar = tmp_path / "empty.npz", tmp_path / "cut.npz", tmp_path / "scalar.npz"
    empty.write_bytes(b"")
    table = ShortlistTable(8, {5: np.arange(2)}, {5: np.zeros(9, np.int64)}, {5: np.zeros(0, np.int32)})
    table.save(cut)
    cut.write_bytes(cut.read_bytes()[:40])
    np.savez(scalar, vocab_size=np.array([8, 8]))
    for path in (empty, cut, scalar):
        with pytest.raises(ValueError, match="is not a shortlist file"):
            load_table(path)
    assert not zipfile.is_zipfile(empty)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.pop("model_config"), "is incomplete: it has no model_config"),
        (lambda p: p["model_config"].update(n_heads=0), "n_heads must be at least 1, got 0"),
        (lambda p: p["model_config"].update(d_model="32"), "d_model must be a whole number, got '32'"),
        (lambda p: p["model_config"].update(languages=3), "languages must be language codes, got 3"),
        (lambda p: p["model_config"].update(d_ff=48), "does not fit: RuntimeError: Error(s) in loading state_dict"),
        (lambda p: p.update(meta=[1]), "its meta must be a mapping"),
    ],
)
def test_a_damaged_checkpoint_is_one_line(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: object, message: str
) -> None:
    import torch

    payload = torch.load(tiny_checkpoint, weights_only=True)
    change(payload)  # type: ignore[operator]
    bad = tmp_path / "bad.pt"
    torch.save(payload, bad)
    assert main(["export", str(bad), str(tmp_path / "out"), "--no-shortlist"]) == 1
    err = _errors(capsys.readouterr().err)
    assert len(err) == 1 and message in err[0], err


def test_checkpoint_writes_name_an_unwritable_place_and_leave_no_temporary(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from transduce.model.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(tiny_checkpoint)
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        save_checkpoint(tmp_path / "adir", ckpt.model, ckpt.tokenizer_model)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "afile" / "model.pt", ckpt.model, ckpt.tokenizer_model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_a_damaged_manifest_of_the_shipped_export_is_stale(tmp_path: Path) -> None:
    checkpoint = tmp_path / "c.pt"
    checkpoint.write_bytes(b"x")
    for manifest in ("[1]", '{"source_checkpoint": "x"}'):
        (tmp_path / "manifest.json").write_text(manifest)
        assert is_stale(checkpoint, tmp_path)


def _errors(stderr: str) -> list[str]:
    """stderr's lines but export's progress line."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("exporting ")]


def test_an_output_in_a_directory_that_cannot_be_written_is_refused_before_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only file system was found only once the table was built or the model trained (as root, chmod does
    not stop writes: the check asks the system, as on a read-only mount)."""
    import os

    from transduce.paths import check_file_target
    from transduce.training.cli import check_fp16_output

    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == tmp_path else real(path, mode))
    with pytest.raises(ValueError, match=f"--out {tmp_path / 'table.npz'}: {tmp_path} cannot be written"):
        check_file_target(tmp_path / "table.npz", what="--out")
    with pytest.raises(ValueError, match="cannot be written"):
        check_fp16_output(tmp_path / "ship.pt", tmp_path / "run")


def test_pairs_that_are_not_code_pairs_and_ragged_corpus_rows_are_refused(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from transduce.export.onnx_export import language_pairs
    from transduce.training.shortlist import read_pairs

    config = SimpleNamespace(languages=("de", "en"), target_tag="<2{}>")

    def checkpoint(meta: dict[str, object], languages: tuple[str, ...] = ("de", "en")) -> Any:
        return SimpleNamespace(meta=meta, config=SimpleNamespace(languages=languages, target_tag=config.target_tag))

    for pairs in ("en-de", [["e"], ["n"]], [["en", 1]]):
        with pytest.raises(ValueError, match="must be \\[source, target\\] code pairs"):
            language_pairs(checkpoint({"pairs": pairs}))
    assert language_pairs(checkpoint({"pairs": [("en", "de")]})) == [["en", "de"]]
    # an export that no engine could load (it succeeded, exit 0): refused
    with pytest.raises(ValueError, match="names \\['xx'\\], not among its languages \\['de', 'en'\\]"):
        language_pairs(checkpoint({"pairs": [("en", "xx")]}))
    with pytest.raises(ValueError, match="meta 'pairs' is empty"):
        language_pairs(checkpoint({"pairs": []}))
    with pytest.raises(ValueError, match="has 0 language"):
        language_pairs(checkpoint({}, languages=()))
    (tmp_path / "train.tsv").write_text("origin\ten\tde\nx\tThe cat.\tDie Katze.\n\nx\tThe dog.\n")
    with pytest.raises(ValueError, match="line 4 has 2 columns, the header 3"):  # it read around them
        read_pairs(tmp_path, 100, 0)


def test_a_damaged_bible_split_file_is_a_value_error(tmp_path: Path) -> None:
    from transduce.training.data import bible

    for content in ('{"a": 1}', "[1]", '{"dev": [[1]], "test": [], "holdout": []}'):
        (tmp_path / "split.json").write_text(content)
        with pytest.raises(ValueError, match="is damaged: it must map dev, test and holdout"):
            bible.load_split(tmp_path / "split.json")


def test_a_test_set_or_corpus_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    from transduce.training.evaluate import read_tsv
    from transduce.training.shortlist import read_pairs

    (tmp_path / "train.tsv").write_bytes(b"origin\ten\tde\nx\tThe cat.\tDie Katze \xfa.\n")
    with pytest.raises(ValueError, match=r"train.tsv is not UTF-8 text \(invalid start byte at byte \d+\)"):
        read_tsv(tmp_path / "train.tsv", "en", "de")
    with pytest.raises(ValueError, match=r"train.tsv is not UTF-8 text"):
        read_pairs(tmp_path, 10, 0)


def test_the_projects_own_cache_is_replaced_whatever_it_holds(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The shipped model's cached export repairs itself (a lost manifest.json); a directory a user named does not."""
    from transduce.export.onnx_export import ExportConfig, export_model

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "encoder.onnx").write_bytes(b"left from an export whose manifest.json was lost")
    with pytest.raises(ValueError, match="is not an earlier export"):
        export_model(tiny_checkpoint, cache, ExportConfig(verify=False))
    export_model(tiny_checkpoint, cache, ExportConfig(verify=False), own_dir=True)
    assert json.loads((cache / "manifest.json").read_text())["format"] == "transduce-onnx"
