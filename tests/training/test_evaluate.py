"""transduce eval on the tiny model: multi-reference grouping, per-origin rows, CLI errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.evaluate import evaluate, read_tsv
from transduce.cli import main


def test_eval_groups_references_and_reports_per_origin(tiny_model_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    tsv = tmp_path / "test.tsv"
    tsv.write_text("origin\ten\tde\nbible\tThe cat sees the dog.\tDie Katze sieht den Hund.\n"
                   "bible\tThe cat sees the dog.\tDie Katze erblickt den Hund.\n"
                   "gettext\tOpen the file\tDatei öffnen\n")
    assert len(read_tsv(tsv, "en", "de")) == 3
    results = evaluate(tiny_model_dir, tsv, source="en", target="de", beam_size=1, progress=False)
    by_origin = {r.origin: r for r in results}
    assert by_origin["all"].sentences == 2 and by_origin["bible"].sentences == 1  # one source, two references
    assert all(0.0 <= r.bleu <= 100.0 and 0.0 <= r.chrf <= 100.0 for r in results)
    assert main(["eval", "--model", str(tiny_model_dir), "--tsv", str(tsv), "-s", "de", "-t", "en",
                 "--beam-size", "1"]) == 0
    assert "| all | de->en | 3 |" in capsys.readouterr().out
    assert main(["eval", "--model", str(tiny_model_dir), "--tsv", str(tsv), "-s", "en", "-t", "fr"]) == 1
    assert "header must name" in capsys.readouterr().err
