"""``transduce bench load`` end to end on the tiny model: the real service as a subprocess, both modes."""

from __future__ import annotations

import json
from pathlib import Path

from bench.load import run

SENTENCES = ["Hello world.", "The cat sees the dog.", "A big red house.", "Good night, old world!"]


def test_load_bench_drives_the_service_in_both_modes(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = run(str(tiny_model_dir), concurrency=(1, 4), requests=12, beam=2, threads=1, work=tmp_path,
                 out_dir=tmp_path / "out", sentences=SENTENCES)
    rows = {(r["batching"], r["concurrency"]): r for r in result["rows"]}
    assert set(rows) == {(True, 1), (True, 4), (False, 1), (False, 4)}
    for (batching, _), row in rows.items():
        assert row["errors"] == 0 and row["requests"] == 12 and row["sentences_per_s"] > 0
        assert row["target_tokens_per_s"] > 0  # counted by the service's own /metrics
        assert row["mean_batch_size"] >= 1 and (batching or row["mean_batch_size"] == 1)
        assert set(row["cpu_ms_per_request"]) == {"client", "server", "event_loop"}
        cpu = row["cpu_ms_per_request"]  # /proc counts in clock ticks: 12 requests may cost the loop 0 of them
        assert cpu["server"] > 0 and cpu["server"] >= cpu["event_loop"] >= 0
    on = rows[(True, 4)]
    assert on["speedup_vs_no_batching"] == round(on["sentences_per_s"] / rows[(False, 4)]["sentences_per_s"], 2)
    assert result["offline_sentences_per_s"] > 0 and "fraction_of_offline" in on
    assert json.loads((tmp_path / "out" / "load.json").read_text())["rows"] == json.loads(json.dumps(result["rows"]))
    table = (tmp_path / "out" / "load.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("| on") or line.startswith("| off")]) == 4
