"""``python -m transduce.bench.cuda``: its tables, and a dry run on the CPU (no GPU here: CUDA rows say why)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tiny import synthetic_sentences
from transduce.bench.contenders import Outcome
from transduce.bench.cuda import main, markdown, read_pairs, summary


def test_rows_count_outputs_equal_to_the_cpu_full_vocabulary_row() -> None:
    runs = {
        ("cuda-fp16", 1, 32): Outcome([[1, 2], [3], [4, 5]], [0.5, 0.5], 700.0),
        ("cpu-fp32-full-4t", 1, 32): Outcome([[1, 2], [3], [4, 6]], [1.0], 200.0),
        ("cpu-fp32-4t", 1, 32): Outcome([[7], [3], [4, 5]], [1.0], 210.0),
        ("cuda-fp32", 4, 32): Outcome([], [], 0.0, "ModelLoadError: no CUDA"),
    }
    rows = summary(runs, ["a b", "c", "d e"], lambda ids: " ".join(map(str, ids)))
    by = {(r["engine"], r["beam"]): r for r in rows}
    assert by["cuda-fp16", 1]["same_as_cpu_fp32_full"] == "2/3"
    assert by["cpu-fp32-4t", 1]["same_as_cpu_fp32_full"] == "1/3"
    assert by["cpu-fp32-full-4t", 1]["same_as_cpu_fp32_full"] == "3/3"
    assert by["cuda-fp16", 1]["target_tokens_per_s"] == 8.0  # 5 ids + 3 eos in 1 s
    assert by["cuda-fp32", 4] == {"engine": "cuda-fp32", "beam": 4, "batch": 32, "error": "ModelLoadError: no CUDA"}
    table = markdown({"gpu": "g", "cpu": "c", "onnxruntime": "1", "date": "d", "settings": "s", "rows": rows})
    assert "| cuda-fp16 | 1 | 32 | 8.0 |" in table and "ModelLoadError: no CUDA" in table


def test_pairs_are_read_up_to_n(tmp_path: Path) -> None:
    (tmp_path / "p.tsv").write_text("a\tA\nno tab here\nb\tB\nc\tC\n", encoding="utf-8")
    assert read_pairs(tmp_path / "p.tsv", 2) == (["a", "b"], ["A", "B"])
    (tmp_path / "q.tsv").write_text("a\tA\nb\tB\textra\n", encoding="utf-8")  # ("too many values to unpack")
    with pytest.raises(ValueError, match="q.tsv: line 2 has 3 columns: write source TAB reference"):
        read_pairs(tmp_path / "q.tsv", 5)


@pytest.mark.usefixtures("one_torch_thread")
def test_a_dry_run_on_the_cpu_reports_cuda_missing_and_the_scheduler_matching_the_engine(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    words = synthetic_sentences(6)
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{s}\n" for s in words), encoding="utf-8")
    args = ["--checkpoint", str(tiny_checkpoint), "--pairs", str(tmp_path / "p.tsv"), "--work", str(tmp_path / "w")]
    args += ["--out", str(tmp_path / "out"), "--sentences", "6", "--batch1-sentences", "2", "--cpu-threads", "1"]
    assert main([*args, "--scheduler-device", "cpu"]) == 0
    result = json.loads((tmp_path / "out" / "cuda.json").read_text())
    rows = {(r["engine"], r["beam"], r["batch"]): r for r in result["rows"]}
    assert len(rows) == 12  # cuda-fp16, cuda-fp32, cpu full, cpu (shortlist) x 3 configs
    assert all("CUDA" in r["error"] for (engine, _, _), r in rows.items() if engine.startswith("cuda"))
    assert rows["cpu-fp32-full-1t", 4, 32]["same_as_cpu_fp32_full"] == "6/6"
    assert [r["same_as_engine_alone"] for r in result["scheduler"]] == ["6/6"] * 4
    assert "| cpu-fp32-full-1t | 1 | 1 |" in (tmp_path / "out" / "cuda.md").read_text()


def test_the_command_names_a_missing_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from transduce.bench.cli import add_arguments
    from transduce.bench.cli import run as run_bench

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["cuda", "--checkpoint", str(tmp_path / "none.pt"), "--out", str(tmp_path / "out")])
    assert run_bench(args) == 1
    assert capsys.readouterr().err.strip() == f"transduce bench: checkpoint {tmp_path / 'none.pt'} does not exist"
