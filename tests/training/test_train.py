"""Training tests on a tiny synthetic corpus: schedule, batching, loss goes down, resume, averaging, CLI, DDP."""

from __future__ import annotations

import dataclasses
import random
import re
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from transduce.model.checkpoint import load_raw
from transduce.tokenizer import Tokenizer
from transduce.training.average import average_checkpoints
from transduce.training.batching import collate, make_examples, read_pairs, token_batches
from transduce.training.config import TrainConfig, noam_lr
from transduce.training.run_setup import load_weights
from transduce.training.train import Trainer

WORDS = [
    ("house", "Haus"),
    ("cat", "Katze"),
    ("dog", "Hund"),
    ("big", "gross"),
    ("small", "klein"),
    ("red", "rot"),
    ("the", "das"),
    ("sees", "sieht"),
    ("water", "Wasser"),
    ("night", "Nacht"),
]


def write_corpus(path: Path, n: int = 400, seed: int = 0) -> Path:
    """A word-for-word synthetic parallel corpus (learnable quickly)."""
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n), ("dev", 40)):
        with open(path / f"{split}.tsv", "w") as f:
            f.write("origin\ten\tde\n")
            for i in range(count):
                words = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
                origin = "ding" if i % 3 == 0 else "bible"
                f.write(f"{origin}\t{' '.join(w[0] for w in words)}\t{' '.join(w[1] for w in words)}\n")
    return path


TINY = TrainConfig(
    d_model=32,
    n_heads=4,
    d_ff=64,
    n_encoder_layers=1,
    n_decoder_layers=1,
    vocab_size=60,
    max_tokens=512,
    max_len=32,
    tokenizer_sample=2000,
    warmup_steps=5,
    eval_examples=40,
    bleu_sentences=5,
    checkpoint_minutes=1000,
    threads=1,
    precision="fp32",
    dropout=0.1,
    origin_weights=(),
)


def test_noam_schedule_peaks_at_warmup() -> None:
    values = [noam_lr(s, 512, 4000) for s in (1, 2000, 4000, 8000)]
    assert values[0] < values[1] < values[2] > values[3]
    assert values[2] == pytest.approx(512**-0.5 * 4000**-0.5)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"max_steps": -1}, "max_steps and max_minutes must be finite and >= 0"),  # it wrote an untrained model, exit 0
        ({"max_minutes": -1.0}, "max_steps and max_minutes must be finite and >= 0"),
        ({"keep_checkpoints": 0}, "keep_checkpoints and average_last must be >= 1"),
        ({"label_smoothing": 5.0}, "label_smoothing and dropout must be >= 0 and < 1"),  # a torch traceback, later
        ({"dropout": 2.0}, "label_smoothing and dropout must be >= 0 and < 1"),  # once the tokenizer was trained
        ({"d_model": 250, "n_heads": 3}, "n_heads must be >= 1 and divide d_model (250), got 3"),
        ({"max_minutes": float("inf")}, "max_steps and max_minutes must be finite and >= 0"),
        ({"threads": -3}, "threads must be >= 0"),
        ({"d_model": 0}, "d_model must be >= 1, got 0"),  # (these failed once the tokenizer was trained)
        ({"max_positions": 0}, "max_positions must be >= 1, got 0"),
        ({"max_len": 0}, "max_len must be >= 1, got 0"),
        ({"tokenizer_sample": 0}, "tokenizer_sample must be >= 1, got 0"),  # (SentencePiece's INTERNAL message)
        ({"lr_scale": float("nan")}, "lr_scale must be a finite number"),  # (it trained on)
        ({"checkpoint_minutes": float("inf")}, "checkpoint_minutes finite and >= 0"),
        # an IndexError in the positional encoding at the first step, once the tokenizer was trained
        ({"max_len": 64, "max_positions": 40}, "max_positions (40) must hold an example of max_len (64)"),
        ({"eval_examples": 0}, "eval_examples must be >= 1"),  # its dev loss read 0.0, the best there is
        ({"bleu_sentences": -1}, "bleu_sentences >= 0"),
    ],
)
def test_a_config_that_cannot_train_is_refused_when_built(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        dataclasses.replace(TINY, **bad)


@pytest.mark.parametrize("weights", ["bible=x", "bible", "=2", "bible=-1", "bible=inf", "bible=1e9"])
def test_a_bad_origin_weight_is_named(weights: str) -> None:
    """``--origin-weights bible=x`` said "could not convert string to float: 'x'"."""
    from transduce.training.cli import _origin_weight

    assert _origin_weight(" bible=0.25") == ("bible", 0.25)
    message = f"pairs with a weight from 0 to 100, such as bible=0.25; got {weights!r}"
    with pytest.raises(ValueError, match=re.escape(message)):
        _origin_weight(weights)


def test_a_corpus_weighted_to_nothing_is_refused_not_looped_over(tmp_path: Path) -> None:
    """Every origin weighted 0: each epoch held no batch, and the run went from epoch to epoch forever, past its
    step and time limits (they are checked between batches)."""
    data = write_corpus(tmp_path / "data", n=30)
    cfg = dataclasses.replace(TINY, max_steps=5, max_minutes=1.0, origin_weights=(("bible", 0.0), ("ding", 0.0)))
    with pytest.raises(ValueError, match=r"every origin of .*train.tsv is weighted 0 \(bible, ding\)"):
        Trainer(data, tmp_path / "run", cfg, progress=False)
    assert not (tmp_path / "run" / "tokenizer.model").exists()  # refused before the tokenizer is trained
    (data / "train.tsv").write_text("origin\ten\tde\n")
    with pytest.raises(ValueError, match="train.tsv has no pairs"):
        Trainer(data, tmp_path / "run", TINY, progress=False)


def test_epochs_that_sample_nothing_are_skipped_but_not_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small weights: some epochs sample no pair. They are skipped (the run stopped there, saying the weights were
    0, and lost its steps); epochs that never hold a batch (more ranks than batches) end the run with a message."""
    data = write_corpus(tmp_path / "data", n=30)  # 60 examples at 0.02: about 30 % of epochs are empty
    cfg = dataclasses.replace(TINY, max_steps=20, origin_weights=(("bible", 0.02), ("ding", 0.02)), bleu_sentences=0)
    trainer = Trainer(data, tmp_path / "run", cfg, progress=False)
    assert any(not trainer.epoch_batches(e) for e in range(20))
    assert trainer.run()["steps"] == 20
    monkeypatch.setattr(Trainer, "epoch_batches", lambda self, epoch: [])
    with pytest.raises(ValueError, match="1000 epochs in a row held no batch of this rank"):
        Trainer(data, tmp_path / "run2", cfg, progress=False).run()


def test_token_batches_respect_the_budget_and_cover_the_data(tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "data")
    trainer = Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=1), progress=False)
    examples = trainer.train_examples
    batches = token_batches(examples, 256, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(len(examples)))
    for batch in batches:
        longest = max(len(examples[i].src) + len(examples[i].tgt) + 1 for i in batch)
        assert longest * len(batch) <= 256 or len(batch) == 1
    weighted = token_batches(examples, 256, random.Random(0), {"ding": 0.0})
    assert all(examples[i].origin != "ding" for b in weighted for i in b)
    counts = Counter(i for b in token_batches(examples, 256, random.Random(0), {"ding": 2.5}) for i in b)
    ding = [i for i, ex in enumerate(examples) if ex.origin == "ding"]
    assert {counts[i] for i in ding} == {2, 3} and abs(sum(counts[i] for i in ding) / len(ding) - 2.5) < 0.25
    assert all(counts[i] == 1 for i, ex in enumerate(examples) if ex.origin != "ding")  # weight 1: exactly once


def test_examples_are_bidirectional_and_tagged(tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "data", n=20)
    trainer = Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=1), progress=False)
    tok: Tokenizer = trainer.tokenizer
    rows = read_pairs(data / "train.tsv")[:1]
    to_de, to_en = make_examples(rows, tok, 32)
    assert to_de.src[0] == tok.tag_id("de") and to_en.src[0] == tok.tag_id("en")
    assert tok.decode(to_de.tgt) == rows[0][2] and tok.decode(to_en.tgt) == rows[0][1]


def test_another_pair_is_trained_with_its_own_tag(tmp_path: Path) -> None:
    """A corpus whose header names another language (origin/en/fr) trains en<->fr with <2fr>/<2en> tags."""
    data = write_corpus(tmp_path / "data", n=40)
    for split in ("train", "dev"):
        path = data / f"{split}.tsv"
        path.write_text(path.read_text().replace("origin\ten\tde\n", "origin\ten\tfr\n", 1))
    cfg = dataclasses.replace(TINY, max_steps=2, languages=("en", "fr"))
    trainer = Trainer(data, tmp_path / "run", cfg, progress=False)
    assert trainer.lang == "fr" and trainer.train_examples[0].src[0] == trainer.tokenizer.tag_id("fr")
    summary = trainer.run()
    assert "dev_bleu_en_fr" in summary and "dev_bleu_fr_en" in summary
    assert load_raw(tmp_path / "run" / "last.pt")["meta"]["name"] == "transduce-en-fr"
    (data / "dev.tsv").write_text("origin\ten\tde\nbible\ta\tb\n")
    with pytest.raises(ValueError, match="different languages"):
        Trainer(data, tmp_path / "run2", cfg, progress=False)


def test_loss_goes_down_and_resume_matches_uninterrupted(tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "data")
    straight = Trainer(data, tmp_path / "a", dataclasses.replace(TINY, max_steps=40), progress=False)
    first = straight.evaluate(bleu=False)["dev_loss"]
    summary = straight.run()
    assert summary["dev_loss"] < first - 0.5
    Trainer(data, tmp_path / "b", dataclasses.replace(TINY, max_steps=25), progress=False).run()
    resumed = Trainer(data, tmp_path / "b", dataclasses.replace(TINY, max_steps=40), progress=False)
    assert resumed.step == 25
    resumed.run()
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    assert (tmp_path / "b" / "average.pt").is_file() and (tmp_path / "b" / "metrics.jsonl").is_file()
    again = Trainer(data, tmp_path / "b", dataclasses.replace(TINY, max_steps=40), progress=False)
    assert again.run()["steps"] == 40  # a run at its limit takes no further step (it took one per call)
    for (name, a), b in zip(straight.model.state_dict().items(), again.model.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    last = tmp_path / "b" / "last.pt"  # a run saved with limits refused today resumes with the ones given now
    payload = torch.load(last, weights_only=True)
    payload["train_config"].update(max_steps=-1, keep_checkpoints=0)
    del payload["train_config"]["average_last"]  # (missing: the default, not "all")
    torch.save(payload, last)
    later = Trainer(data, tmp_path / "b", dataclasses.replace(TINY, max_steps=40), progress=False).cfg
    assert (later.max_steps, later.keep_checkpoints > 100, later.average_last) == (40, True, TrainConfig().average_last)


def test_ctrl_c_finishes_the_step_saves_it_and_the_run_resumes_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C lost everything since the last checkpoint (every 10 minutes by default): the step in progress now ends,
    is saved, and the same run resumes from it; a failure to save (a full disk) is one line from the command."""
    import os
    import signal

    from transduce.training.interrupt import Interrupted

    data = write_corpus(tmp_path / "data", n=100)
    trainer = Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=50), progress=False)
    step = trainer.train_step

    def interrupted_at_three(batch: Any) -> Any:
        result = step(batch)
        if trainer.step == 3:
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler, "Ctrl-C is not deferred"
            os.kill(os.getpid(), signal.SIGINT)  # arrives inside the step: handled after it
        return result

    monkeypatch.setattr(trainer, "train_step", interrupted_at_three)
    with pytest.raises(Interrupted, match="interrupted at step 3: saved ckpt_step0000003.pt and last.pt"):
        trainer.run()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    resumed = Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=50), progress=False)
    assert resumed.step == 3
    for (name, a), b in zip(trainer.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_run_saved_with_settings_refused_since_resumes(tmp_path: Path) -> None:
    """eval_examples 0 and max_positions under max_len + 2 were accepted before; such a run is not locked out."""
    data = write_corpus(tmp_path / "data", n=100)
    Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=2, bleu_sentences=0), progress=False).run()
    last = tmp_path / "run" / "last.pt"
    payload = torch.load(last, weights_only=True)
    payload["train_config"].update(eval_examples=0, max_positions=33)  # max_len 32
    torch.save(payload, last)
    resumed = Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=3), progress=False)
    assert (resumed.cfg.eval_examples, resumed.cfg.max_len, resumed.cfg.max_positions) == (TINY.eval_examples, 31, 33)


def test_averaging_onto_a_full_disk_is_an_os_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transduce.training.average as average

    data = write_corpus(tmp_path / "data", n=100)
    Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=1, bleu_sentences=0), progress=False).run()

    def full(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")  # torch's ENOSPC

    monkeypatch.setattr(average.torch, "save", full)
    with pytest.raises(OSError, match="cannot write .*average.pt: RuntimeError: \\[enforce fail"):
        average.average_checkpoints(sorted((tmp_path / "run").glob("ckpt_step*.pt")), tmp_path / "run" / "average.pt")


def test_ctrl_c_left_ignored_by_a_background_job_stays_ignored() -> None:
    import signal

    from transduce.training.interrupt import deferred_interrupt

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_interrupt(True) as interrupted:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and not interrupted()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_warm_start_takes_the_checkpoints_weights_tokenizer_and_dimensions(tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "data")
    first = Trainer(data, tmp_path / "first", dataclasses.replace(TINY, max_steps=30), progress=False)
    first.run()
    wider = dataclasses.replace(
        TINY, d_model=64, vocab_size=80, max_steps=5, init_from=str(tmp_path / "first" / "last.pt")
    )
    warm = Trainer(data, tmp_path / "warm", wider, progress=False)
    assert (warm.cfg.d_model, warm.cfg.vocab_size, warm.step) == (32, first.tokenizer.vocab_size, 0)
    assert (tmp_path / "warm" / "tokenizer.model").read_bytes() == (tmp_path / "first" / "tokenizer.model").read_bytes()
    assert warm.evaluate(bleu=False)["dev_loss"] == pytest.approx(first.evaluate(bleu=False)["dev_loss"], abs=1e-5)
    warm.run()
    resumed = Trainer(data, tmp_path / "warm", dataclasses.replace(wider, max_steps=6), progress=False)
    assert resumed.step == 5  # an existing run resumes; init_from is not applied again
    with pytest.raises(ValueError, match="does not fit the model"):
        load_weights(resumed.model, {"bogus.weight": torch.zeros(1)}, "bogus.pt")


def test_average_is_the_mean(tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "data", n=60)
    trainer = Trainer(data, tmp_path / "run", dataclasses.replace(TINY, max_steps=2), progress=False)
    one = trainer.save()
    trainer.train_step(collate(trainer.train_examples[:4], 0, trainer.mcfg.decoder_start_id, trainer.mcfg.eos_id))
    two = trainer.save()
    out = average_checkpoints([one, two], tmp_path / "avg.pt")
    a, b, avg = (load_raw(p)["state_dict"] for p in (one, two, out))
    for key in avg:
        if avg[key].is_floating_point():
            assert torch.allclose(avg[key], (a[key] + b[key]) / 2, atol=1e-6)
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([], tmp_path / "x.pt")


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transduce.cli import main

    data = write_corpus(tmp_path / "data", n=100)
    code = main(
        [
            "train",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "run"),
            "--d-model",
            "32",
            "--n-heads",
            "4",
            "--d-ff",
            "64",
            "--n-encoder-layers",
            "1",
            "--n-decoder-layers",
            "1",
            "--vocab-size",
            "60",
            "--max-tokens",
            "512",
            "--max-len",
            "32",
            "--tokenizer-sample",
            "1000",
            "--max-steps",
            "3",
            "--bleu-sentences",
            "2",
            "--threads",
            "1",
            "--export-fp16",
            str(tmp_path / "ship.pt"),
        ]
    )
    assert code == 0
    assert '"steps": 3' in capsys.readouterr().out
    shipped = load_raw(tmp_path / "ship.pt")
    assert all(v.dtype == torch.float16 for v in shipped["state_dict"].values() if v.is_floating_point())
    assert main(["train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "r2")]) == 1
    assert "no train.tsv" in capsys.readouterr().err
    (tmp_path / "no-dev").mkdir()
    (tmp_path / "no-dev" / "train.tsv").write_bytes((data / "train.tsv").read_bytes())
    (tmp_path / "no-dev" / "dev.tsv").write_text("origin\ten\tde\n")  # its dev loss read 0.0
    no_dev = ["train", "--data", str(tmp_path / "no-dev"), "--out", str(tmp_path / "r4"), "--vocab-size", "60"]
    assert main([*no_dev, "--max-steps", "1", "--bleu-sentences", "0"]) == 1
    assert "dev.tsv has no pairs" in capsys.readouterr().err
    small = ["train", "--data", str(data), "--out", str(tmp_path / "r6"), "--vocab-size", "5", "--max-steps", "1"]
    assert main(small) == 1  # (SentencePiece's "INTERNAL: src/trainer_interface.cc(638) [...]" was the message)
    err = capsys.readouterr().err
    assert re.fullmatch(r"transduce train: vocab_size 5 is too small: .* alone take \d+; give at least that .*\n", err)
    zero = ["--origin-weights", "bible=0,ding=0", "--max-steps", "1"]
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "r5"), *zero]) == 1
    err = capsys.readouterr().err
    assert err.startswith("transduce train: every origin of") and err.count("\n") == 1
    # refused before a step: an --export-fp16 on the run's own checkpoint or on a directory, an --out under a file
    run = ["train", "--data", str(data), "--max-steps", "9"]
    before = (tmp_path / "run" / "last.pt").read_bytes()
    assert main([*run, "--out", str(tmp_path / "run"), "--export-fp16", str(tmp_path / "run" / "last.pt")]) == 1
    assert "is a file of the run itself" in capsys.readouterr().err
    assert main([*run, "--out", str(tmp_path / "run"), "--export-fp16", str(tmp_path)]) == 1
    assert "is a directory" in capsys.readouterr().err
    assert main([*run, "--out", str(tmp_path / "fresh"), "--export-fp16", str(tmp_path / "fresh")]) == 1
    assert "is a directory" in capsys.readouterr().err and not (tmp_path / "fresh").exists()  # before training
    assert (tmp_path / "run" / "last.pt").read_bytes() == before
    assert main([*run, "--out", str(tmp_path / "ship.pt" / "run")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("transduce train: ") and err.count("\n") == 1
    assert main([*run, "--out", str(tmp_path / "r3"), "--n-heads", "0"]) in (1, 2)
    err = capsys.readouterr().err
    assert "n_heads" in err and err.count("\n") == 1
    full = OSError(28, "No space left on device")  # a checkpoint that cannot be written: one line, not a traceback

    def no_space(*args: Any, **kwargs: Any) -> None:
        raise full

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("transduce.training.train.save_checkpoint", no_space)
        assert main([*run[:3], "--out", str(tmp_path / "r7"), "--max-steps", "2", "--vocab-size", "60"]) == 1
    err = capsys.readouterr().err
    assert err == "transduce train: [Errno 28] No space left on device\n", err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ddp_worker(rank: int, world: int, port: int, data: str, out: str) -> None:
    import os

    os.environ.update(
        {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    )
    trainer = Trainer(data, out, dataclasses.replace(TINY, max_steps=4, bleu_sentences=0), progress=False)
    torch.save(trainer.model.state_dict(), Path(out) / f"init{rank}.pt")
    trainer.run()
    torch.save(trainer.model.state_dict(), Path(out) / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_ddp_two_cpu_processes_stay_in_sync(tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "data", n=200)
    out = tmp_path / "run"
    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(data), str(out)), nprocs=2, join=True)
    r0, r1 = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    init = torch.load(out / "init0.pt")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    assert any(not torch.equal(r0[k], init[k]) for k in r0 if r0[k].is_floating_point())


def test_a_resumed_run_says_which_options_named_it_does_not_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed run keeps its own options: one named differently on the command line used to be dropped without a
    word. It is now listed on stderr before the run; the run limits and the machine's options (threads, how often to
    checkpoint) are the ones named now. A warm start lists the dimensions the checkpoint overrides the same way."""
    from transduce.cli import main

    data = write_corpus(tmp_path / "data", n=100)
    tiny = ["--d-model", "32", "--d-ff", "64", "--n-encoder-layers", "1", "--n-decoder-layers", "1"]
    tiny += ["--vocab-size", "60", "--max-tokens", "512", "--max-len", "32", "--tokenizer-sample", "1000"]
    first = ["train", "--data", str(data), "--out", str(tmp_path / "run"), *tiny, "--bleu-sentences", "0"]
    assert main([*first, "--max-steps", "2", "--threads", "1"]) == 0
    assert capsys.readouterr().err == ""
    again = [*first, "--max-steps", "3", "--threads", "2", "--lr-scale", "2", "--languages", "de,en,fr"]
    assert main([*again, "--checkpoint-minutes", "5"]) == 0
    err = capsys.readouterr().err
    assert err == (
        f"transduce train: resuming the run in {tmp_path / 'run'}, which keeps its own options (train into another "
        "--out to change them): ignored --languages de,en,fr (de,en used); --lr-scale 2.0 (1.0 used)\n"
    )
    saved = load_raw(tmp_path / "run" / "last.pt")
    assert saved["progress"]["step"] == 3
    assert {k: saved["train_config"][k] for k in ("threads", "checkpoint_minutes", "lr_scale", "d_model")} == {
        "threads": 2,
        "checkpoint_minutes": 5.0,
        "lr_scale": 1.0,
        "d_model": 32,
    }
    assert main([*first, "--max-steps", "3", "--languages", "en,de"]) == 0  # the same options again (in any order)
    assert capsys.readouterr().err == ""
    assert main([*first, "--max-steps", "3", "--init-from", str(tmp_path / "x.pt"), "--origin-weights", "ding=2"]) == 0
    err = capsys.readouterr().err  # (a list given replaces the table: the origins it leaves out weigh 1)
    assert f"ignored --init-from {tmp_path / 'x.pt'} (none used); --origin-weights auf-deutsch-word=1," in err
    assert ",ding=2," in err and ",ding=0.25," in err and "tatoeba=1,wmt=1,wmt-sys=1 (" in err
    warm = ["train", "--data", str(data), "--out", str(tmp_path / "warm"), "--bleu-sentences", "0", "--max-steps", "1"]
    assert main([*warm, "--init-from", str(tmp_path / "run" / "last.pt"), "--d-model", "64", "--n-heads", "4"]) == 0
    assert capsys.readouterr().err == (
        f"transduce train: --init-from {tmp_path / 'run' / 'last.pt'} decides the model's dimensions, languages and "
        "tokenizer: ignored --d-model 64 (32 used)\n"
    )
