"""The training loop (paper section 5): token-count batches, Adam + eq. 3 warm-up, label smoothing, checkpoints."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Collection
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from transduce.model.checkpoint import load_raw, save_checkpoint
from transduce.model.transformer import Transformer
from transduce.tokenizer import Tokenizer
from transduce.training.average import average_checkpoints
from transduce.training.batching import (
    Example,
    check_sampled,
    collate,
    corpus_language,
    make_examples,
    read_pairs,
    token_batches,
)
from transduce.training.config import TrainConfig, ignored_options, noam_lr, resumed_config
from transduce.training.decode import greedy
from transduce.training.interrupt import Interrupted, deferred_interrupt
from transduce.training.run_setup import build_tokenizer, load_weights, model_config, warm_start_config

log = logging.getLogger("transduce.train")
MAX_EMPTY_EPOCHS = 1000  # epochs in a row that sample no batch before a run gives up


def _rank_world() -> tuple[int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class Trainer:
    """One run: data, model, optimiser, schedule, checkpoints; resumable from out_dir/last.pt."""

    def __init__(
        self,
        data_dir: str | Path,
        out_dir: str | Path,
        cfg: TrainConfig,
        *,
        progress: bool = True,
        named: Collection[str] = (),
    ) -> None:
        """``named``: the options given on the command line (a resumed run takes MACHINE_OPTIONS among them, and
        ``ignored`` lists those it does not take)."""
        given = cfg
        self.data_dir, self.out_dir = Path(data_dir), Path(out_dir)
        self.rank, self.world = _rank_world()
        self.progress = progress and self.rank == 0
        self.out_dir.mkdir(parents=True, exist_ok=True)
        resume = load_raw(self.out_dir / "last.pt") if (self.out_dir / "last.pt").is_file() else None
        init = load_raw(cfg.init_from) if cfg.init_from and not resume else None
        # a resumed run keeps its saved config but for the run limits and the machine options named now
        if resume is not None and not isinstance(resume.get("train_config"), dict):
            raise ValueError(
                f"{self.out_dir / 'last.pt'} is a checkpoint but not a training run's (it has no train_config): "
                "move it, or train into another --out"
            )
        if init is not None and not isinstance(init.get("model_config"), dict):
            raise ValueError(f"--init-from {cfg.init_from} is incomplete: it has no model_config")
        if resume:  # the limits given now replace the saved ones before the config is checked
            cfg = resumed_config(resume["train_config"], cfg, named)
        elif init:
            cfg = warm_start_config(cfg, init, self.out_dir)
        self.cfg, self.resumed = cfg, resume is not None
        self.ignored = ignored_options(given, cfg, named)  # options named that the run does not take (the CLI says)
        if init and "tokenizer_sample" in named:
            self.ignored.append(f"--tokenizer-sample {given.tokenizer_sample} (the checkpoint's tokenizer used)")
        check_sampled(self.data_dir / "train.tsv", dict(cfg.origin_weights))  # before the tokenizer is trained
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.device = torch.device(
            f"cuda:{self.rank % torch.cuda.device_count()}" if torch.cuda.is_available() else "cpu"
        )
        if self.rank == 0:
            self.spm = build_tokenizer(self.data_dir, self.out_dir, self.cfg)
        if self.world > 1:
            dist.barrier()
        self.spm = (self.out_dir / "tokenizer.model").read_bytes()
        self.tokenizer = Tokenizer(self.spm, target_tag="<2{lang}>", languages=self.cfg.languages)
        self.mcfg = model_config(self.cfg, self.tokenizer)
        torch.manual_seed(self.cfg.seed)
        self.model = Transformer(self.mcfg).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        self.step, self.tokens_seen, self.epoch, self.batch_pos, self.elapsed = 0, 0, 0, 0, 0.0
        self.history: list[dict[str, Any]] = []
        if init:
            load_weights(self.model, init["state_dict"], cfg.init_from)
        if resume:
            self.model.load_state_dict({k: v.float() for k, v in resume["state_dict"].items()}, strict=False)
            self.optimizer.load_state_dict(resume["optimizer"])
            s = resume["progress"]
            self.step, self.tokens_seen, self.epoch, self.batch_pos, self.elapsed = (
                s["step"],
                s["tokens_seen"],
                s["epoch"],
                s["batch_pos"],
                s["elapsed"],
            )
            self.history = resume.get("history", [])
            torch.set_rng_state(resume["rng"]["torch"])
        self.ddp = torch.nn.parallel.DistributedDataParallel(self.model) if self.world > 1 else None
        self.loss_fn = torch.nn.CrossEntropyLoss(
            ignore_index=self.mcfg.pad_id, reduction="sum", label_smoothing=self.cfg.label_smoothing
        )
        self.lang = corpus_language(self.data_dir / "train.tsv")  # the pair is en-<lang>
        if corpus_language(self.data_dir / "dev.tsv") != self.lang:
            raise ValueError(f"{self.data_dir}: train.tsv and dev.tsv name different languages")
        self.train_examples = make_examples(
            read_pairs(self.data_dir / "train.tsv"), self.tokenizer, self.cfg.max_len, self.lang
        )
        if not self.train_examples:
            raise ValueError(f"no pair of {self.data_dir / 'train.tsv'} fits max_len {self.cfg.max_len} tokens")
        dev_rows = read_pairs(self.data_dir / "dev.tsv")
        if not dev_rows:  # the dev loss would read 0.0, the best there is
            raise ValueError(f"{self.data_dir / 'dev.tsv'} has no pairs: the run measures its dev loss on them")
        random.Random(0).shuffle(dev_rows)
        self.dev_rows = dev_rows
        self.dev_examples = make_examples(
            dev_rows[: self.cfg.eval_examples], self.tokenizer, self.cfg.max_len, self.lang
        )

    def autocast(self) -> Any:
        """bf16 autocast (CPU or CUDA) unless precision is fp32."""
        if self.cfg.precision == "fp32":
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch`` (deterministic from seed and epoch)."""
        rng = random.Random(self.cfg.seed * 1000 + epoch)
        batches = token_batches(self.train_examples, self.cfg.max_tokens, rng, dict(self.cfg.origin_weights))
        usable = len(batches) - len(batches) % self.world
        return batches[self.rank : usable : self.world]

    def train_step(self, batch: dict[str, torch.Tensor]) -> tuple[float, int]:
        """One update; returns (summed loss, target tokens)."""
        model = self.ddp or self.model
        batch = {k: v.to(self.device) for k, v in batch.items()}
        lr = noam_lr(self.step + 1, self.mcfg.d_model, self.cfg.warmup_steps, self.cfg.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with self.autocast():
            logits = model(batch["src"], batch["src_mask"], batch["tgt_in"])
        loss = self.loss_fn(logits.float().view(-1, logits.shape[-1]), batch["tgt_out"].view(-1))
        ntok = int((batch["tgt_out"] != self.mcfg.pad_id).sum())
        self.optimizer.zero_grad(set_to_none=True)
        (loss / max(ntok, 1)).backward()
        if self.cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.step += 1
        return float(loss.detach()), ntok

    @torch.no_grad()
    def evaluate(self, bleu: bool = True) -> dict[str, float]:
        """Dev loss (per target token, label smoothing off) and greedy dev BLEU per direction."""
        import sacrebleu

        self.model.eval()
        loss_fn = torch.nn.CrossEntropyLoss(ignore_index=self.mcfg.pad_id, reduction="sum")
        total, ntok = 0.0, 0
        pad, start, eos = self.mcfg.pad_id, self.mcfg.decoder_start_id, self.mcfg.eos_id
        for i in range(0, len(self.dev_examples), 64):
            b = collate(self.dev_examples[i : i + 64], pad, start, eos)
            logits = self.model(b["src"].to(self.device), b["src_mask"].to(self.device), b["tgt_in"].to(self.device))
            total += float(loss_fn(logits.float().view(-1, logits.shape[-1]), b["tgt_out"].to(self.device).view(-1)))
            ntok += int((b["tgt_out"] != pad).sum())
        result = {"dev_loss": total / max(ntok, 1)}
        if bleu and self.cfg.bleu_sentences:
            rows = self.dev_rows[: self.cfg.bleu_sentences]
            for src_lang, tgt_lang, si, ti in (("en", self.lang, 1, 2), (self.lang, "en", 2, 1)):
                exs = [
                    Example(
                        np.array(self.tokenizer.encode_source(r[si], tgt_lang), np.int32), np.zeros(0, np.int32), r[0]
                    )
                    for r in rows
                ]
                hyps = []
                for j in range(0, len(exs), 32):
                    b = collate(exs[j : j + 32], pad, start, eos)
                    hyps += [
                        self.tokenizer.decode(h)
                        for h in greedy(self.model, b["src"].to(self.device), b["src_mask"].to(self.device))
                    ]
                result[f"dev_bleu_{src_lang}_{tgt_lang}"] = sacrebleu.corpus_bleu(hyps, [[r[ti] for r in rows]]).score
        self.model.train()
        return result

    def save(self, final: bool = False) -> Path:
        """ckpt_step<N>.pt + last.pt (with optimiser/progress for resuming); old ones pruned."""
        progress = {
            "step": self.step,
            "tokens_seen": self.tokens_seen,
            "epoch": self.epoch,
            "batch_pos": self.batch_pos,
            "elapsed": self.elapsed,
        }
        meta = {
            "name": f"transduce-en-{self.lang}",
            "steps": self.step,
            "tokens_seen": self.tokens_seen,
            "train_seconds": round(self.elapsed, 1),
            "final": final,
        }
        extra = {
            "train_config": self.cfg.to_dict(),
            "optimizer": self.optimizer.state_dict(),
            "progress": progress,
            "history": self.history,
            "rng": {"torch": torch.get_rng_state()},
        }
        path = self.out_dir / f"ckpt_step{self.step:07d}.pt"
        save_checkpoint(path, self.model, self.spm, meta=meta, extra=extra)
        save_checkpoint(self.out_dir / "last.pt", self.model, self.spm, meta=meta, extra=extra)
        for old in sorted(self.out_dir.glob("ckpt_step*.pt"))[: -self.cfg.keep_checkpoints]:
            old.unlink()
        return path

    def log(self, record: dict[str, Any]) -> None:
        """Append to metrics.jsonl and the history kept in checkpoints."""
        record = {"step": self.step, "tokens_seen": self.tokens_seen, "elapsed_s": round(self.elapsed, 1), **record}
        self.history.append(record)
        with open(self.out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def run(self) -> dict[str, Any]:
        """Train until max_steps / max_minutes; checkpoint, evaluate, average the last checkpoints. Ctrl-C (one
        process) ends the step in progress, saves a checkpoint and raises ``Interrupted``; a second one stops at
        once."""
        with deferred_interrupt(self.world == 1) as interrupted:
            return self._run(interrupted)

    def _run(self, interrupted: Callable[[], bool]) -> dict[str, Any]:
        cfg = self.cfg
        self.model.train()
        started = time.monotonic() - self.elapsed
        last_ckpt = time.monotonic()
        bar = tqdm(
            total=cfg.max_steps or None,
            initial=self.step,
            desc="train",
            unit=" step",
            file=sys.stderr,
            disable=not self.progress,
        )
        window_tok, window_t0, empty_epochs = 0, time.monotonic(), 0
        # a resumed run already at its step or time limit takes no further step (the limits are the run's totals)
        stop = bool(cfg.max_steps and self.step >= cfg.max_steps) or bool(
            cfg.max_minutes and self.elapsed >= cfg.max_minutes * 60
        )
        while not stop:
            batches = self.epoch_batches(self.epoch)
            if not batches:  # small weights can sample nothing, and ranks can outnumber an epoch's batches: skipped,
                empty_epochs += 1  # but not for ever (an epoch of nothing checks no limit)
                if empty_epochs >= MAX_EMPTY_EPOCHS:
                    raise ValueError(
                        f"{MAX_EMPTY_EPOCHS} epochs in a row held no batch of this rank: the origins' weights sample "
                        f"too little of the corpus for {self.world} process(es); raise them (--origin-weights)"
                    )
                self.epoch, self.batch_pos = self.epoch + 1, 0
                continue
            empty_epochs = 0
            while self.batch_pos < len(batches):
                loss, ntok = self.train_step(
                    collate(
                        [self.train_examples[i] for i in batches[self.batch_pos]],
                        self.mcfg.pad_id,
                        self.mcfg.decoder_start_id,
                        self.mcfg.eos_id,
                    )
                )
                self.batch_pos += 1
                self.tokens_seen += ntok * self.world
                window_tok += ntok * self.world
                self.elapsed = time.monotonic() - started
                if self.step % 20 == 0 or self.step == 1:
                    rate = window_tok / max(time.monotonic() - window_t0, 1e-6)
                    eta = f"{max(cfg.max_minutes * 60 - self.elapsed, 0) / 60:.0f}m" if cfg.max_minutes else "-"
                    lr = noam_lr(self.step, self.mcfg.d_model, cfg.warmup_steps, cfg.lr_scale)
                    bar.set_postfix(
                        loss=f"{loss / max(ntok, 1):.3f}",
                        tok_s=f"{rate:.0f}",
                        epoch=self.epoch,
                        eta=eta,
                        lr=f"{lr:.2e}",
                    )
                    if self.rank == 0 and self.step % 100 == 0:
                        self.log({"train_loss": loss / max(ntok, 1), "target_tokens_per_s": round(rate)})
                        window_tok, window_t0 = 0, time.monotonic()
                bar.update(1)
                if interrupted():  # (the work since the last checkpoint, up to checkpoint_minutes, was lost)
                    bar.close()
                    path = self.save()
                    raise Interrupted(
                        f"interrupted at step {self.step}: saved {path.name} and last.pt in {self.out_dir}; the same "
                        "command resumes the run"
                    )
                out_of_steps = bool(cfg.max_steps and self.step >= cfg.max_steps)
                out_of_time = bool(cfg.max_minutes and self.elapsed >= cfg.max_minutes * 60)
                if out_of_steps or out_of_time:
                    stop = True
                    break
                if self.rank == 0 and time.monotonic() - last_ckpt >= cfg.checkpoint_minutes * 60:
                    self.log(self.evaluate(bleu=False))
                    self.save()
                    last_ckpt = time.monotonic()
            if not stop:
                self.epoch, self.batch_pos = self.epoch + 1, 0
        bar.close()
        summary: dict[str, Any] = {"steps": self.step, "tokens_seen": self.tokens_seen, "seconds": round(self.elapsed)}
        if self.rank == 0:
            self.save(final=True)
            recent = sorted(self.out_dir.glob("ckpt_step*.pt"))[-cfg.average_last :]
            average_checkpoints(recent, self.out_dir / "average.pt")
            summary["averaged"] = [p.name for p in recent]
            if interrupted():  # (a Ctrl-C here was ignored until the final evaluation, minutes on a CPU, had run)
                raise Interrupted(f"interrupted after step {self.step}: saved last.pt and average.pt in {self.out_dir}")
            summary.update(self.evaluate())
            self.log({"final": True, **summary})
        if self.world > 1:
            dist.barrier()
        return summary
