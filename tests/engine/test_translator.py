"""Translator tests on the tiny exported model: parity with PyTorch, batch independence, options, load errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from transduce.engine.errors import InputTooLongError, ModelLoadError, UnsupportedLanguageError
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
from transduce.model.checkpoint import Checkpoint, load_checkpoint

SENTENCES = [
    "Hello world.",
    "The cat sees the dog.",
    "A big red house.",
    "Good night, old world!",
    "The small blue dog runs to the green house and sees the water.",
    "Hallo Welt.",
    "Tag",
]


def torch_greedy(ckpt: Checkpoint, ids: list[int], max_len: int, min_len: int = 1) -> list[int]:
    """Reference greedy decoding in PyTorch with the KV cache."""
    model, cfg = ckpt.model, ckpt.config
    src = torch.tensor([ids])
    mask = torch.ones_like(src, dtype=torch.bool)
    out: list[int] = []
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src, mask))
        cache, token = None, cfg.decoder_start_id
        for step in range(max_len):
            logits, cache = model.decode_step(torch.tensor([[token]]), cross, mask, cache)
            lp = torch.log_softmax(logits[0, -1], -1)
            if step < min_len:
                lp[cfg.eos_id] = -float("inf")
            token = int(lp.argmax())
            if token == cfg.eos_id:
                break
            out.append(token)
    return out


def test_greedy_matches_pytorch_token_for_token(tiny_translator: Translator, tiny_checkpoint: Path) -> None:
    tok = tiny_translator.tokenizer
    sources = [tok.encode_source(s, "de") for s in SENTENCES]
    results = tiny_translator.translate_batch(sources, options=DecodeOptions(beam_size=1))
    ckpt = load_checkpoint(tiny_checkpoint)
    for ids, result in zip(sources, results, strict=True):
        assert result.tokens[0] == torch_greedy(ckpt, ids, 2 * len(ids) + 10)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_output_does_not_depend_on_batch(tiny_translator: Translator, beam_size: int) -> None:
    options = DecodeOptions(beam_size=beam_size, return_scores=True)
    together = tiny_translator.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
    alone = [tiny_translator.translate([s], source_lang="en", target_lang="de", options=options)[0] for s in SENTENCES]
    assert [r.tokens for r in together] == [r.tokens for r in alone]
    small_chunks = tiny_translator.translate(
        SENTENCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=beam_size, chunk_size=2)
    )
    assert [r.tokens for r in small_chunks] == [r.tokens for r in together]


def rows_per_step(translator: Translator, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The decoder state's rows at each step of ``translator`` from now on (a list filled as it steps)."""
    runner, rows = translator.runner, []
    step = runner.step

    def counted(tokens: Any, state: Any) -> Any:
        rows.append(state.rows)
        return step(tokens, state)

    monkeypatch.setattr(runner, "step", counted)
    return rows


@pytest.mark.parametrize(("beam_size", "shortlist"), [(1, False), (3, False), (3, True)])
def test_each_result_is_handed_over_as_soon_as_its_sentence_ends(
    tiny_translator: Translator,
    shortlist_model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    beam_size: int,
    shortlist: bool,
) -> None:
    translator = Translator(shortlist_model_dir, device="cpu") if shortlist else tiny_translator
    rows = rows_per_step(translator, monkeypatch)  # one entry per step
    texts = [*SENTENCES, "  "]  # a blank input is answered without decoding, with the others
    options = DecodeOptions(beam_size=beam_size, num_hypotheses=2 if beam_size > 1 else 1, return_scores=True)
    early: list[tuple[int, Any, int]] = []
    results = translator.translate(
        texts,
        source_lang="en",
        target_lang="de",
        options=options,
        on_result=lambda i, r: early.append((i, r, len(rows))),
    )
    assert sorted(i for i, _, _ in early) == list(range(len(texts)))  # each input once, the blank one too
    assert all(results[i] == result for i, result, _ in early)
    assert min(at for _, _, at in early) < len(rows)  # some were handed over while others still decoded
    assert results == translator.translate(texts, source_lang="en", target_lang="de", options=options)


@pytest.mark.parametrize("shortlist", [False, True])
def test_finished_greedy_rows_stay_in_the_state_until_a_quarter_has_finished(
    tiny_translator: Translator, shortlist_model_dir: Path, monkeypatch: pytest.MonkeyPatch, shortlist: bool
) -> None:
    translator = Translator(shortlist_model_dir, device="cpu") if shortlist else tiny_translator
    runner = translator.runner
    state_rows: list[int] = []  # per step
    gathers: list[tuple[int, int]] = []  # (state rows, rows kept)
    step, reorder = runner.step, runner.reorder

    def counted(tokens: Any, state: Any) -> Any:
        assert len(tokens) == state.rows
        state_rows.append(state.rows)
        return step(tokens, state)

    def spied(state: Any, rows: Any, sentences: Any) -> None:
        gathers.append((state.rows, len(rows)))
        assert sentences is not None and list(sentences) == list(rows)  # greedy: a row is a sentence
        reorder(state, rows, sentences)

    monkeypatch.setattr(runner, "step", counted)
    monkeypatch.setattr(runner, "reorder", spied)
    options = DecodeOptions(beam_size=1, return_scores=True)
    lengths: list[int] = []
    results = translator.translate(
        SENTENCES,
        source_lang="en",
        target_lang="de",
        options=options,
        on_result=lambda i, r: lengths.append(len(state_rows)),
    )
    assert len(set(lengths)) >= 3  # sentences finished at several different steps
    assert gathers and all((total - kept) * 4 >= total for total, kept in gathers)  # only once a quarter finished
    assert len(gathers) < len(set(lengths)) - 1  # fewer gathers than steps where sentences left
    decoding = [sum(at >= j for at in lengths) for j in range(1, len(state_rows) + 1)]  # sentences left, per step
    assert any(rows > left for rows, left in zip(state_rows, decoding, strict=True))  # finished rows still there
    monkeypatch.undo()
    alone = [translator.translate([s], source_lang="en", target_lang="de", options=options)[0] for s in SENTENCES]
    assert [r.tokens for r in results] == [r.tokens for r in alone]
    assert [r.scores[0] for r in results] == pytest.approx([r.scores[0] for r in alone], abs=1e-5)


def test_blank_and_letterless_input_is_given_back_without_decoding(tiny_translator: Translator) -> None:
    decoded = tiny_translator.stats.sentences
    out = tiny_translator.translate(["  ", "123", " -- ", "\x07"], source_lang="en", target_lang="de")
    assert [r.hypotheses for r in out] == [[""], ["123"], ["--"], ["\x07"]]
    assert tiny_translator.stats.sentences == decoded  # nothing reached the model


def test_beam_search_scores_at_least_greedy(tiny_translator: Translator) -> None:
    greedy = tiny_translator.translate(
        SENTENCES,
        source_lang="en",
        target_lang="de",
        options=DecodeOptions(beam_size=1, return_scores=True, length_penalty=0.0),
    )
    beam = tiny_translator.translate(
        SENTENCES,
        source_lang="en",
        target_lang="de",
        options=DecodeOptions(beam_size=4, return_scores=True, length_penalty=0.0),
    )
    for g, b in zip(greedy, beam, strict=True):
        assert b.scores[0] >= g.scores[0] - 1e-4


def test_options_are_respected(tiny_translator: Translator) -> None:
    nbest = tiny_translator.translate(
        SENTENCES[:3],
        source_lang="de",
        target_lang="en",
        options=DecodeOptions(beam_size=4, num_hypotheses=3, return_scores=True),
    )
    for r in nbest:
        assert len(r.hypotheses) == 3 and r.scores == sorted(r.scores, reverse=True)
        assert len({tuple(t) for t in r.tokens}) == 3
    short = tiny_translator.translate(
        SENTENCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=2, max_decoding_length=3)
    )
    assert all(len(r.tokens[0]) <= 3 for r in short)
    blank = tiny_translator.translate(["", "   "], source_lang="en", target_lang="de")
    assert [r.hypotheses for r in blank] == [[""], [""]]
    assert all(r.scores == [] for r in short)
    stats = tiny_translator.stats
    assert stats.sentences > 0 and stats.generated_tokens > 0 and stats.padded_source_tokens >= stats.source_tokens


def test_output_length_is_capped_relative_to_the_source(tiny_translator: Translator) -> None:
    """The runaway guard: twice the source plus 10 by default, the model's positions at most."""
    ids = tiny_translator.tokenizer.encode_source("Tag", "de")
    assert DecodeOptions().max_lengths([len(ids), 200], cap=255) == [2 * len(ids) + 10, 255]
    assert DecodeOptions(max_length_ratio=1.5, extra_decoding_length=0).max_lengths([10], cap=255) == [15]
    assert DecodeOptions(max_decoding_length=7).max_lengths([3, 100], cap=5) == [5, 5]
    with pytest.raises(ValueError, match="max_length_ratio"):
        DecodeOptions(max_length_ratio=0)
    # never under 1, which the search refuses: a 3-piece source at ratio 0.3 and no extra length got 0
    assert DecodeOptions(max_length_ratio=0.3, extra_decoding_length=0).max_lengths([3, 1, 10], cap=255) == [1, 1, 3]
    assert DecodeOptions(max_length_ratio=1e308).max_lengths([3], cap=255) == [255]  # ratio * 3 is inf: capped
    for ratio in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="max_length_ratio must be a number > 0"):
            DecodeOptions(max_length_ratio=ratio)
    for penalty in (float("nan"), float("inf"), -0.1):  # NaN passed and failed later, in the search
        with pytest.raises(ValueError, match="length_penalty must be a number >= 0"):
            DecodeOptions(length_penalty=penalty)
    options = DecodeOptions(beam_size=1, min_decoding_length=50)  # eos forbidden: only the cap can stop it
    (result,) = tiny_translator.translate(["Tag"], source_lang="en", target_lang="de", options=options)
    assert len(result.tokens[0]) == 2 * len(tiny_translator.tokenizer.encode_source("Tag", "de")) + 10


def test_errors(tiny_translator: Translator) -> None:
    with pytest.raises(UnsupportedLanguageError, match="en->fr"):
        tiny_translator.translate(["x"], source_lang="en", target_lang="fr")
    with pytest.raises(UnsupportedLanguageError):
        tiny_translator.translate(["x"], source_lang="en", target_lang="en")
    with pytest.raises(InputTooLongError, match="at most 256"):
        tiny_translator.translate_batch([[5] * 300])
    with pytest.raises(ValueError, match="num_hypotheses"):
        DecodeOptions(beam_size=2, num_hypotheses=3)
    with pytest.raises(ValueError, match="beam_size"):
        DecodeOptions(beam_size=0)


def test_io_binding_path_matches_numpy_path(tiny_model_dir: Path, tiny_translator: Translator) -> None:
    """The device-resident (IO binding) code path used on CUDA, run here on the CPU provider."""
    bound = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    from transduce.engine.iobinding_runner import IOBindingRunner

    bound.runner = IOBindingRunner(bound.runner.sessions)  # on the CPU provider: device 'cpu'
    for beam in (1, 3):
        options = DecodeOptions(beam_size=beam)
        expected = tiny_translator.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
        got = bound.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
        assert [r.tokens for r in got] == [r.tokens for r in expected]


def test_load_errors(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        Translator(tmp_path / "nope")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    for graph in ("decoder.onnx", "decoder_cpu.onnx"):  # the CPU loads the second
        data = (broken / graph).read_bytes()
        (broken / graph).write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="checksum"):
        Translator(broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest.pop("checksums")
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="cannot load the ONNX graphs"):
        Translator(broken)
    mismatch = tmp_path / "mismatch"
    shutil.copytree(tiny_model_dir, mismatch)
    manifest = json.loads((mismatch / "manifest.json").read_text())
    manifest["dims"]["tgt_vocab_size"] += 1
    manifest.pop("checksums")
    (mismatch / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="does not match the manifest"):
        Translator(mismatch)
    (mismatch / "manifest.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        Translator(mismatch)
    for pairs, problem in (([["en", "fr"]], r"lists pairs in \['fr'\], not among its languages"), ([], "no pairs")):
        manifest = json.loads((tiny_model_dir / "manifest.json").read_text())  # (a traceback at the canary)
        manifest["pairs"] = pairs
        (mismatch / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(ModelLoadError, match=problem):
            Translator(mismatch)


@pytest.mark.parametrize("damaged", ["gather.onnx", "tokenizer.model", "decoder_cpu.onnx"])
def test_every_file_the_manifest_lists_is_checked(tiny_model_dir: Path, tmp_path: Path, damaged: str) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    manifest = json.loads((model / "manifest.json").read_text())
    assert damaged in manifest["checksums"] and manifest["gather"] == "gather.onnx"
    (model / damaged).write_bytes((model / damaged).read_bytes()[:-7] + b"garbage")
    with pytest.raises(ModelLoadError, match=f"{damaged} does not match the checksum"):
        Translator(model)
    (model / damaged).unlink()
    with pytest.raises(ModelLoadError, match=f"{damaged} named in .* is missing"):
        Translator(model)


def test_cuda_request_without_cuda_falls_back_or_fails_strictly(tiny_model_dir: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(ModelLoadError, match="no CUDA execution provider"):
            Translator(tiny_model_dir, device="cuda")
        return
    # onnxruntime-gpu on a machine without a GPU: CUDA is listed but cannot start -> CPU with a warning
    translator = Translator(tiny_model_dir, device="cuda")
    if translator.provider == "CPUExecutionProvider":
        with pytest.raises(ModelLoadError, match="CUDA provider failed"):
            Translator(tiny_model_dir, device="cuda", strict_device=True)


def test_missing_cuda_libraries_are_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """onnxruntime-gpu without the CUDA libraries: the CPU, said once however often providers are chosen."""
    import onnxruntime as ort

    from transduce.engine import session

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "preload_dlls", lambda: print("Failed to load libcudart.so.13 (a test)"), raising=False)
    monkeypatch.setattr(session, "_SAID", set())
    with caplog.at_level("INFO", logger="transduce.engine"):
        assert [session.choose_providers("auto") for _ in range(3)] == [["CPUExecutionProvider"]] * 3
    assert [r.getMessage() for r in caplog.records if "CUDA libraries" in r.getMessage()] == [
        "CUDA libraries not found (Failed to load libcudart.so.13 (a test)); using the CPU"
    ]


def test_cuda_asked_for_without_its_libraries_says_which_one_instead_of_onnxruntime_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tiny_model_dir: Path
) -> None:
    """device="cuda" with onnxruntime-gpu but no CUDA libraries: the CPU and one warning naming the missing library
    (onnxruntime printed screenfuls of its own errors for each session first), or with strict_device one error."""
    import onnxruntime as ort

    from transduce.engine import session

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "preload_dlls", lambda: print("Failed to load libcublasLt.so.13 (a test)"), raising=False)
    monkeypatch.setattr(session, "_SAID", set())
    with caplog.at_level("INFO", logger="transduce.engine"):
        assert session.choose_providers("cuda") == session.choose_providers("cuda") == ["CPUExecutionProvider"]
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "CUDA libraries" in r.getMessage()]
    assert said == [("WARNING", "CUDA libraries not found (Failed to load libcublasLt.so.13 (a test)); using the CPU")]
    assert Translator(tiny_model_dir, device="cuda").provider == "CPUExecutionProvider"
    with pytest.raises(ModelLoadError, match=r"failed to initialise \(Failed to load libcublasLt.so.13 \(a test\)\)"):
        Translator(tiny_model_dir, device="cuda", strict_device=True)


def test_session_rejects_bad_device(tiny_model_dir: Path) -> None:
    from transduce.engine.manifest import load_manifest
    from transduce.engine.session import open_runner

    with pytest.raises(ValueError, match="device must be"):
        open_runner(load_manifest(tiny_model_dir), device="tpu")


def test_the_shared_pool_is_made_once_and_then_runs_every_session() -> None:
    from transduce.engine.session import SharedPool, session_options

    made: list[int] = []
    pool = SharedPool(made.append)
    own = session_options(2, 1, spin=False, pool=pool)  # before it is made: a pool of its own, asleep between runs
    assert own.use_per_session_threads is True and own.intra_op_num_threads == 2
    assert own.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    pool.make(2)
    pool.make(1)
    assert made == [2]  # onnxruntime makes it once per process
    for threads in (2, 1):  # then every session runs on it (onnxruntime refuses pools of their own)
        assert session_options(threads, 1, spin=False, pool=pool).use_per_session_threads is False

    def refused(threads: int) -> None:
        raise RuntimeError("Global thread pools have already been created, cannot replace them")

    elsewhere = SharedPool(refused)  # made by something else in the process, of a size we cannot know
    elsewhere.make(2)
    assert session_options(2, 1, pool=elsewhere).use_per_session_threads is False

    def broken(threads: int) -> None:
        raise RuntimeError("out of threads")

    failed = SharedPool(broken)  # not made for another reason: sessions keep pools of their own, as before
    failed.make(2)
    assert session_options(2, 1, pool=failed).use_per_session_threads is True
    never = SharedPool(None)  # the test suite's: engines keep pools of their own
    never.make(2)
    assert session_options(2, 1, pool=never).use_per_session_threads is True


def test_engines_opened_after_the_shared_pool_run_on_it(tiny_model_dir: Path) -> None:
    """In a fresh process, as the service and the command line open engines: an engine opened before the pool has
    pools of its own (the encoder's asleep between runs, not spinning against the decoder's steps), and so has one of
    several replicas; the first engine of one replica that asks makes the shared pool, and every engine opened after
    it runs on it; all translate the same."""
    script = f"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
model, key = {str(tiny_model_dir)!r}, "session.intra_op.allow_spinning"
engines = [Translator(model, device="cpu", intra_threads=1)]
engines.append(Translator(model, device="cpu", intra_threads=1, replicas=2, shared_pool=True))
engines.append(Translator(model, device="cpu", intra_threads=2, shared_pool=True))
print("opening the fourth engine", file=sys.stderr, flush=True)
engines.append(Translator(model, device="cpu", intra_threads=1))
out = []
for t in engines:
    enc, dec = (s.get_session_options() for s in (t.runner.sessions.encoder, t.runner.sessions.decoder))
    tokens = t.translate_batch([[5, 6, 7, 8, 9, 10]], options=DecodeOptions(beam_size=2))[0].tokens
    own = [enc.use_per_session_threads, dec.use_per_session_threads]
    spin = [o.get_session_config_entry(key) for o in (enc, dec)] + [dec.intra_op_num_threads] if own[0] else None
    out.append([own, spin, tokens])
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ignored when using a global thread pool" not in done.stderr  # no onnxruntime warning per session
    before, after = done.stderr.split("opening the fourth engine")
    # the engine that asked for 1 thread is told it runs on the pool of 2; the search's top-k session is not an engine
    assert "asked for" not in before and "an engine asked for 1 threads" in after
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # replicas decode at the same time on threads of their own: an engine of two makes no pool
    assert [row[0] for row in out] == [[True, True], [True, True], [False, False], [False, False]]
    assert out[0][1] == ["0", "1", 1]  # a pool of its own: the encoder's asleep between runs, the decoder's spinning
    assert out[0][2] == out[1][2] == out[2][2] == out[3][2]


def test_replicas_decode_side_by_side_with_the_same_outputs(tiny_model_dir: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    one = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    two = Translator(tiny_model_dir, device="cpu", intra_threads=1, replicas=2)
    assert len(two.runners) == 2 and two.runners[0] is two.runner
    assert two.runners[1].sessions is two.runner.sessions  # one thread each: the same sessions, run at once
    entered = threading.Barrier(2, timeout=10)
    used: set[int] = set()
    for i, runner in enumerate(two.runners):
        encode = runner.encode

        def both_inside(ids: Any, mask: Any, encode: Any = encode, i: int = i) -> Any:
            used.add(i)
            entered.wait()  # returns only once the other replica is inside encode too
            return encode(ids, mask)

        runner.encode = both_inside  # type: ignore[method-assign,assignment]
    sentences = [["the house", "a small cat sees the dog"], ["hello world", "good night"]]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda s: two.translate(s, source_lang="en", target_lang="de"), sentences))
    assert used == {0, 1}
    for batch, results in zip(sentences, got, strict=True):
        assert [r.tokens for r in results] == [
            r.tokens for r in one.translate(batch, source_lang="en", target_lang="de")
        ]
    with pytest.raises(ValueError, match="replicas must be a positive integer or 0"):
        Translator(tiny_model_dir, device="cpu", replicas=-1)


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 2), (8, 2)])
def test_auto_replicas_two_on_a_multi_core_cpu_sharing_one_shortlist(
    shortlist_model_dir: Path, monkeypatch: pytest.MonkeyPatch, cores: int, expected: int
) -> None:
    monkeypatch.setattr("transduce.engine.session.usable_cores", lambda: cores)
    auto = Translator(shortlist_model_dir, device="cpu", replicas=0)
    assert len(auto.runners) == expected
    assert all(r.sessions.options.intra_op_num_threads == cores // expected for r in auto.runners)
    shortlists = {id(r.sessions.shortlist) for r in auto.runners}
    assert len(shortlists) == 1 and auto.runner.sessions.shortlist is not None  # one table and projection in memory
    sessions = {id(r.sessions) for r in auto.runners}  # replicas of one thread run the same sessions; wider ones not
    assert len(sessions) == (1 if cores // expected == 1 else expected)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "200000 100000\n"}, 2),  # cgroup v2: 2 CPUs
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: 2 threads
        ({"cpu.max": "max 100000\n"}, None),  # unlimited: the affinity
        ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_usable_cores_follow_the_containers_cpu_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], expected: int | None
) -> None:
    from transduce.engine.session import usable_cores

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)))
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert usable_cores(tmp_path) == (64 if expected is None else expected)
