"""``transduce bench engines`` end to end on the tiny checkpoint: every contender here, the same ids in fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers is a bench extra")
pytest.importorskip("ctranslate2", reason="ctranslate2 is a bench extra")
pytestmark = [
    pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses", "ignore::torch.jit.TracerWarning"),
    pytest.mark.usefixtures("one_torch_thread"),
]

from transduce.bench.contenders import RUNNERS, device_of  # noqa: E402
from transduce.bench.engines import CONFIGS, run  # noqa: E402
from transduce.bench.engines import ENGINES as ALL_ENGINES  # noqa: E402

SENTENCES = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "The small blue dog runs to the green house.",
    "Water.",
]
ENGINES = ("transduce-cpu-fp32", "transduce-cpu-int8", "transformers", "ctranslate2-fp32", "ctranslate2-int8")


def test_engines_bench_rows_and_fp32_agreement(tiny_checkpoint: Path, tmp_path: Path) -> None:
    result = run(
        tiny_checkpoint,
        n=6,
        n_batch1=2,
        threads=1,
        work=tmp_path / "work",
        out_dir=tmp_path / "out",
        engines=ENGINES,
        fixed_length=7,
        sentences=SENTENCES,
    )
    rows = {(r["engine"], r["beam"], r["batch"]): r for r in result["rows"]}
    assert set(rows) == {(e, beam, batch) for e in ENGINES for beam, batch in CONFIGS}
    for (engine, _, batch), row in rows.items():
        assert "error" not in row, row
        assert row["sentences"] == (6 if batch > 1 else 2)
        assert row["target_tokens_per_s"] > 0 and row["peak_rss_mb"] > 0
        if engine.endswith("fp32") or engine == "transformers":  # same weights, same search: the same ids
            assert row["identical_to_reference_pct"] == 100.0 and row["bleu_vs_reference"] == 100.0
    assert json.loads((tmp_path / "out" / "engines.json").read_text())["fixed_length"] == 7
    assert len((tmp_path / "out" / "engines.md").read_text().splitlines()) == 4 + len(rows)


def test_cuda_contenders_run_on_cuda() -> None:
    assert set(ALL_ENGINES) == set(RUNNERS)
    for engine in ALL_ENGINES:
        assert device_of(engine) == ("cuda" if "cuda" in engine else "cpu"), engine
