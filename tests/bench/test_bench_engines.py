"""``transduce bench engines`` end to end on the tiny checkpoint: every contender here, the same ids in fp32."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers", reason="transformers is a bench extra")
pytest.importorskip("ctranslate2", reason="ctranslate2 is a bench extra")
pytestmark = [
    pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses", "ignore::torch.jit.TracerWarning"),
    pytest.mark.usefixtures("one_torch_thread"),
]

from tests.engine.test_shortlist import table_of  # noqa: E402
from transduce.bench.contenders import RUNNERS, Outcome, device_of  # noqa: E402
from transduce.bench.engines import CONFIGS, best_of, faster, rotated, run  # noqa: E402
from transduce.bench.engines import ENGINES as ALL_ENGINES  # noqa: E402
from transduce.model.checkpoint import load_checkpoint  # noqa: E402

SENTENCES = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "The small blue dog runs to the green house.",
    "Water.",
]
ENGINES = (
    "transduce-cpu-fp32",
    "transduce-cpu-fp32-full",
    "transduce-cpu-int8",
    "transduce-cpu-int8-full",
    "transformers",
    "ctranslate2-fp32",
    "ctranslate2-int8",
    "ctranslate2-fp32-vmap",
)


def small_run(checkpoint: Path, tmp_path: Path, engines: tuple[str, ...], **options: Any) -> dict[str, Any]:
    """``run`` on SENTENCES with one thread, working and writing under ``tmp_path``."""
    return run(
        checkpoint,
        threads=(1,),
        work=tmp_path / "work",
        out_dir=tmp_path / "out",
        engines=engines,
        sentences=SENTENCES,
        **options,
    )


def test_engines_bench_rows_and_fp32_agreement(tiny_checkpoint: Path, tmp_path: Path) -> None:
    # beside the checkpoint, a shortlist whose candidates are every piece: the shortlist rows (ours, and CTranslate2's
    # with it as a vocabulary map) must then decode exactly like the full vocabulary
    checkpoint = tmp_path / "ckpt" / "checkpoint.pt"
    checkpoint.parent.mkdir()
    shutil.copy(tiny_checkpoint, checkpoint)
    tok = load_checkpoint(checkpoint).tokenizer()
    keys = [int(tok.tag_id(lang) or 0) for lang in ("de", "en")]
    table_of(tok.vocab_size, keys, list(range(tok.vocab_size))).save(checkpoint.parent / "shortlist.npz")
    result = small_run(checkpoint, tmp_path, ENGINES, n=6, n_batch1=2, fixed_length=7)
    rows = {(r["engine"], r["beam"], r["batch"]): r for r in result["rows"]}
    assert set(rows) == {(e, beam, batch) for e in ENGINES for beam, batch in CONFIGS}
    for (engine, _, batch), row in rows.items():
        assert "error" not in row, row
        assert row["sentences"] == (6 if batch > 1 else 2)
        assert row["target_tokens_per_s"] > 0 and row["peak_rss_mb"] > 0
        assert row["threads"] == 1 and set(row["tokens_per_s_by_threads"]) == {1}
        if "fp32" in engine or engine == "transformers":  # same weights, same search: the same ids
            assert row["identical_to_reference_pct"] == 100.0 and row["bleu_vs_reference"] == 100.0
    assert json.loads((tmp_path / "out" / "engines.json").read_text())["fixed_length"] == 7
    assert len((tmp_path / "out" / "engines.md").read_text().splitlines()) == 4 + len(rows)


def test_cuda_contenders_run_on_cuda() -> None:
    assert set(ALL_ENGINES) == set(RUNNERS)
    for engine in ALL_ENGINES:
        assert device_of(engine) == ("cuda" if "cuda" in engine else "cpu"), engine


def test_best_of_thread_counts_keeps_the_fastest_run() -> None:
    slow = Outcome([[1, 2, 3]], [2.0], 10.0)
    fast = Outcome([[1, 2, 3]], [0.5], 12.0)
    failed = Outcome([], [], 5.0, error="RuntimeError: boom")
    assert best_of({1: slow, 2: fast}) == (2, fast)
    assert best_of({1: fast, 2: slow}) == (1, fast)
    assert best_of({1: failed, 2: slow}) == (2, slow)
    assert best_of({1: failed}) == (1, failed)


def test_rounds_run_every_engine_in_turn_and_keep_each_ones_best(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engines = ("transduce-cpu-fp32-full", "ctranslate2-fp32")
    result = small_run(tiny_checkpoint, tmp_path, engines, n=4, n_batch1=1, fixed_length=5, rounds=2)
    progress = [line for line in capsys.readouterr().err.splitlines() if "round" in line]
    # per config: round 1 of every engine, then round 2 of every engine, starting with the next one
    assert len(progress) == 2 * len(engines) * len(CONFIGS)
    first = progress[: 2 * len(engines)]
    assert [("round 1 of 2" in line, engines[0] in line) for line in first] == [
        (True, True),
        (True, False),
        (False, False),
        (False, True),
    ]
    assert result["rounds"] == 2 and "best of 2 rounds" in (tmp_path / "out" / "engines.md").read_text()
    assert all("error" not in r and r["target_tokens_per_s"] > 0 for r in result["rows"])
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        run(tiny_checkpoint, threads=(1,), work=tmp_path / "work", out_dir=tmp_path / "o2", engines=engines, rounds=0)


def test_each_round_starts_one_engine_later() -> None:
    engines = ["a", "b", "c"]
    assert [rotated(engines, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert rotated([], 2) == []


def test_rounds_keep_each_runs_best_and_a_finished_run_over_a_failed_one() -> None:
    slow = Outcome([[1, 2, 3]], [2.0], 10.0)
    fast = Outcome([[1, 2, 3]], [0.5], 12.0)
    failed = Outcome([], [], 5.0, error="RuntimeError: boom")
    assert faster(None, slow) is slow and faster(None, failed) is failed
    assert faster(slow, fast) is fast and faster(fast, slow) is fast  # the best, not the last
    assert faster(failed, slow) is slow and faster(slow, failed) is slow
