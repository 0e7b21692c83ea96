"""``transduce bench load`` end to end on the tiny model: the real service as a subprocess in every mode."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from transduce.bench.load import HEAVY_CHARS, MODES, SET_BY_MODE, heavy_workload, run, server_env, workload

SENTENCES = ["Hello world.", "The cat sees the dog.", "A big red house.", "Good night, old world!"]


def test_mixed_workload_is_80_percent_short_with_mixed_beams() -> None:
    load = workload(SENTENCES, 20, 4, mixed=True)
    assert sum(r.short for r in load) == 16 and {r.beam for r in load if r.short} == {1, 4}
    assert all(len(r.text.splitlines()) == 5 for r in load if not r.short)
    assert all(r.short and r.beam == 4 for r in workload(SENTENCES, 8, 4, mixed=False))


def test_heavy_workload_sends_the_longest_sentences_first_then_short_ones_behind_them() -> None:
    sentences = [f"Sentence {i} " + "word " * (i % 40) for i in range(200)]
    load, at = heavy_workload(sentences, 4)
    heavy, short = load[:3], load[3:]
    assert not any(r.short for r in heavy) and all(r.short and r.beam == 4 for r in short) and len(short) == 24
    assert all(r.beam == 8 and len(r.text) <= HEAVY_CHARS for r in heavy)
    assert all(len(r.text) > HEAVY_CHARS - 250 for r in heavy)  # filled up to the limit, with distinct sentences
    lines = [line for r in heavy for line in r.text.splitlines()]
    assert len(set(lines)) == len(lines)  # each heavy request its own sentences, the longest first
    assert sorted(len(r.text.splitlines()[0]) for r in heavy) == sorted(map(len, sentences))[-3:]
    assert at[:3] == [0.0] * 3 and at[3] == 0.5 and at == sorted(at) and at[-1] == pytest.approx(0.5 + 0.08 * 23)
    assert heavy_workload(sentences, 1)[0][0].beam == 2
    quarter = sorted(map(len, sentences))[len(sentences) // 4 - 1]
    assert all(len(r.text) <= quarter for r in short)  # short sentences, as the "Hello world."


def test_load_bench_drives_the_service_in_every_mode(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = run(
        str(tiny_model_dir),
        concurrency=(1, 4),
        arrivals=(0.5,),
        requests=10,
        beam=2,
        threads=1,
        work=tmp_path,
        out_dir=tmp_path / "out",
        sentences=SENTENCES,
    )
    open_rows = [r for r in result["rows"] if r["workload"] == "mixed-open"]
    rate = open_rows[0]["arrivals_per_s"]  # from the unrounded capacity, so compared to the reported one within 0.01
    assert rate == pytest.approx(0.5 * result["offline_sentences_per_s"] / 1.8, abs=0.01)
    assert [(r["mode"], r["arrivals_per_s"], r["concurrency"]) for r in open_rows] == [(m, rate, None) for m in MODES]
    for row in open_rows:  # arrivals at the rate: the last comes about requests / rate seconds in
        assert row["errors"] == 0 and 0 < row["short_p50_ms"] <= row["short_p99_ms"]
        assert row["seconds"] > 0.3 * 10 / rate and "speedup_vs_off" not in row
    heavy_rows = [r for r in result["rows"] if r["workload"] == "heavy"]
    assert [r["mode"] for r in heavy_rows] == list(MODES)
    for row in heavy_rows:  # 3 heavy requests, then 24 short ones every 80 ms from 0.5 s on
        assert row["errors"] == 0 and row["requests"] == 27 and row["seconds"] > 0.5 + 0.08 * 23
        assert "speedup_vs_off" not in row and 0 < row["short_p50_ms"] <= row["short_p99_ms"]
        assert ("short_p99_vs_static" in row) == row["mode"].startswith("step")
    rows = {(r["mode"], r["workload"], r["concurrency"]): r for r in result["rows"] if r not in open_rows + heavy_rows}
    assert set(rows) == {(m, w, c) for m in MODES for w in ("uniform", "mixed") for c in (1, 4)}
    for (mode, workload_name, c), row in rows.items():
        assert row["errors"] == 0 and row["requests"] == 10 and row["requests_per_s"] > 0
        assert row["target_tokens_per_s"] > 0  # counted by the service's own /metrics
        assert row["mean_batch_size"] >= 1 and (mode != "off" or row["mean_batch_size"] == 1)
        assert row["short_p99_ms"] > 0
        cpu = row["cpu_ms_per_request"]  # the event loop's share is measured in ns: it is never 0 for 10 requests
        assert cpu["server"] > 0 and cpu["event_loop"] > 0 and cpu["client"] > 0
        if mode != "off":
            off = rows[("off", workload_name, c)]
            assert row["speedup_vs_off"] == round(row["requests_per_s"] / off["requests_per_s"], 2)
        if mode.startswith("step"):
            static = rows[("static", workload_name, c)]
            assert row["short_p99_vs_static"] == round(static["short_p99_ms"] / row["short_p99_ms"], 2)
    assert result["offline_sentences_per_s"] > 0 and "fraction_of_offline" in rows[("step", "uniform", 4)]
    assert json.loads((tmp_path / "out" / "load.json").read_text())["rows"] == json.loads(json.dumps(result["rows"]))
    table = (tmp_path / "out" / "load.md").read_text().splitlines()
    assert (
        len([line for line in table if line.startswith(("| uniform", "| mixed", "| heavy"))])
        == len(result["rows"])
        == 6 * len(MODES)
    )


def test_arrival_fractions_must_be_positive_numbers() -> None:
    from transduce.bench.cli import _fractions

    assert _fractions("0.3, 0.6,") == (0.3, 0.6) and _fractions("") == ()
    for bad in ("0", "-1", "nan", "inf", "fast"):
        with pytest.raises(ValueError, match="--arrivals takes positive numbers"):
            _fractions(bad)


def test_a_service_that_cannot_start_says_why(tmp_path: Path) -> None:
    """The service's log went to /dev/null: a minute later "did not become ready", and no reason."""
    from transduce.bench.load import serve

    with pytest.raises(RuntimeError, match=r"\(static\) did not become ready: transduce serve: .* does not exist"):
        serve(str(tmp_path / "missing"), "static", 1)


def test_auto_mode_leaves_the_scheduler_replicas_and_threads_to_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` measures the service as it starts by default (e.g. its engine replicas on a GPU machine): none of the
    three settings the other modes fix reaches it, not even from the bench's own environment."""
    monkeypatch.setenv("TRANSDUCE_ENGINE_REPLICAS", "3")
    auto = server_env("model", "auto", 4, 5000)
    assert not set(SET_BY_MODE) & set(auto) and auto["TRANSDUCE_CACHE_SIZE"] == "0"
    fixed = server_env("model", "replicas", 4, 5000)
    assert [fixed[k] for k in SET_BY_MODE] == ["static", "1", "4"]
    assert [server_env("model", "step", 4, 5000)[k] for k in SET_BY_MODE] == ["step", "4", "1"]


def test_an_unknown_mode_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A mistyped mode ran as static batching under its own name."""
    with pytest.raises(ValueError, match=r"unknown mode 'replica': choose from step, .*, auto"):
        run(str(tmp_path / "missing"), modes=("static", "replica"), work=tmp_path, out_dir=tmp_path / "out")


def test_the_servers_take_no_dotenv_and_no_models_from_where_the_bench_runs(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``.env`` file where the bench was started set its servers' settings without a word (``auto``'s three
    included), and ``TRANSDUCE_MODELS`` made them serve other models than the one measured. The settings of the
    bench's own environment still reach them, and are reported with the results."""
    import httpx

    from transduce.bench.load import inherited_settings, serve

    for name in [k for k in os.environ if k.upper().startswith("TRANSDUCE_")]:
        monkeypatch.delenv(name)
    (tmp_path / ".env").write_text("TRANSDUCE_API_KEYS=secret\nTRANSDUCE_MAX_CHARS=3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRANSDUCE_MODELS", str(tmp_path / "other-models"))
    monkeypatch.setenv("TRANSDUCE_MAX_BATCH_TOKENS", "2048")
    monkeypatch.setenv("TRANSDUCE_SCHEDULER", "step")  # set by every mode, or left to the service (auto)
    monkeypatch.setenv("TRANSDUCE_SHARED_DATA", "/data")  # not a service setting
    monkeypatch.setenv("transduce_engine_replicas", "3")  # the service reads names in any case
    monkeypatch.setenv("TRANSDUCE_FILES_DIR", "files")  # relative: to where the bench runs
    monkeypatch.setenv("PYTHONPATH", "lib")
    assert inherited_settings() == {"TRANSDUCE_FILES_DIR": "files", "TRANSDUCE_MAX_BATCH_TOKENS": "2048"}
    env = server_env("model", "auto", 1, 5000)
    assert "transduce_engine_replicas" not in env and env["TRANSDUCE_FILES_DIR"] == str(tmp_path / "files")
    assert str(tmp_path / "lib") in env["PYTHONPATH"].split(os.pathsep)
    proc, url = serve(os.path.relpath(tiny_model_dir), "auto", 1)  # relative to where the bench runs
    try:
        body = {"q": "Hello world.", "source": "en", "target": "de"}
        assert httpx.post(url + "/translate", json=body, timeout=60).status_code == 200
    finally:
        proc.terminate()
        proc.wait(60)


def test_no_clients_no_requests_or_a_file_for_out_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--concurrency 0`` or ``--requests 0`` ran, then ended in numpy's IndexError; an ``--out`` that is a file was
    found once the whole benchmark had run ("[Errno 17] File exists")."""
    from transduce.cli import main

    for args, problem in (  # bad options: exit 2, before anything runs, as in every command
        (["--concurrency", "0"], "--concurrency takes whole numbers >= 1, comma-separated, got '0'"),
        (["--concurrency", "4,two"], "--concurrency takes whole numbers >= 1, comma-separated, got '4,two'"),
        (["--threads", "x"], "--threads takes whole numbers >= 1, comma-separated, got 'x'"),
        (["--requests", "0"], "--requests and --rounds must be >= 1, got 0, 3"),
        (["--arrivals", "-1"], "--arrivals takes positive numbers, got '-1'"),
        (["--threads", "\u00b2"], "--threads takes whole numbers >= 1, comma-separated, got '\u00b2'"),
        (["--modes", "static,bogus"], "--modes takes modes from step, step-replicas, static, replicas, off, auto, "),
        (["--modes", ","], "--modes takes modes from"),
        (["--beam-size", "0"], "--beam-size must be between 1 (greedy) and 64, got 0"),
        (["--sentences", "0"], "--sentences and --batch1-sentences must be >= 1, got 0, 100"),  # (after the exports)
        (["--fixed-length", "0"], "--fixed-length must be >= 1"),
    ):
        assert main(["bench", "load", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"transduce bench: {problem}") and err.count("\n") == 1, err
    (tmp_path / "results.txt").write_text("kept\n")
    assert main(["bench", "load", "--out", str(tmp_path / "results.txt")]) == 2
    assert "is a file: name a directory for the results" in capsys.readouterr().err
