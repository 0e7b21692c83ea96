"""``transduce train --data DIR --out DIR``: every TrainConfig field is an option with its default."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from transduce.paths import check_output, resolved
from transduce.training.config import TrainConfig

_HELP = {
    "max_tokens": "padded source+target tokens per batch",
    "warmup_steps": "eq. 3 warm-up steps (about 4%% of the run)",
    "max_minutes": "stop cleanly after this many minutes (0 = no limit)",
    "max_steps": "stop after N updates (0 = none)",
    "origin_weights": "sampling weights per corpus origin, e.g. ding=0.35,gettext=1",
    "precision": "auto = bf16 autocast (CPU and GPU), fp32 = full precision",
    "init_from": "start from this checkpoint (e.g. the shipped model): its weights, tokenizer and dimensions "
    "(default: a new model)",
}


class _Named(argparse.Action):
    """Stores the option's value and notes that it was named: a resumed run takes some options named on the command
    line and reports the others it does not take (a default cannot be told from a value typed)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.named_options = {*getattr(namespace, "named_options", ()), self.dest}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--data, --out, --export-fp16 and one option per TrainConfig field."""
    parser.add_argument("--data", required=True, help="corpus directory from `transduce data build`")
    parser.add_argument(
        "--out",
        required=True,
        help="run directory (checkpoints, tokenizer, metrics.jsonl); an existing run there is resumed",
    )
    parser.add_argument(
        "--export-fp16",
        default=None,
        help="after training, write the best of average.pt/last.pt as an fp16 checkpoint here",
    )
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "languages":
            parser.add_argument(
                flag,
                default=None,
                action=_Named,
                help="languages (comma-separated) (default: the two language columns of the corpus's train.tsv "
                "header, sorted: de,en for en-de, en,fr for en-fr)",
            )
        elif f.name == "origin_weights":
            weights = ",".join(f"{k}={v}" for k, v in defaults.origin_weights)
            parser.add_argument(flag, default=weights, action=_Named, help=_HELP[f.name])
        else:
            default = getattr(defaults, f.name)
            help_text = _HELP.get(f.name, f.name.replace("_", " "))
            parser.add_argument(flag, type=type(default), default=default, action=_Named, help=help_text)


def corpus_languages(data: Path) -> tuple[str, ...] | None:
    """The language columns named by the header of DATA/train.tsv (``origin<TAB>en<TAB>fr`` -> ("en", "fr"),
    sorted), or None when there is no such file or header."""
    try:
        with open(data / "train.tsv", encoding="utf-8") as f:
            header = f.readline().rstrip("\r\n").split("\t")
    except (OSError, UnicodeDecodeError):
        return None
    return tuple(sorted(header[1:3])) if len(header) >= 3 and header[0] == "origin" else None


MAX_ORIGIN_WEIGHT = 100.0  # an origin's examples appear about this many times an epoch at most


def _origin_weight(item: str) -> tuple[str, float]:
    """One ``ORIGIN=WEIGHT`` of ``--origin-weights`` (``bible=x`` said "could not convert string to float")."""
    origin, equals, weight = item.partition("=")
    try:
        value = float(weight)
    except ValueError:
        value = float("nan")
    if not equals or not origin.strip() or not 0 <= value <= MAX_ORIGIN_WEIGHT:  # (1e9 built 8 GB lists an example)
        raise ValueError(
            f"--origin-weights takes ORIGIN=WEIGHT pairs with a weight from 0 to {MAX_ORIGIN_WEIGHT:g}, such as "
            f"bible=0.25; got {item!r}"
        )
    return origin.strip(), value


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Build and validate the TrainConfig; the languages default to the corpus's (``--data``), and languages given
    with ``--languages`` must include them."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
    corpus = corpus_languages(Path(args.data)) if getattr(args, "data", None) else None
    if args.languages is None:
        values["languages"] = corpus or TrainConfig().languages
    else:
        values["languages"] = tuple(x.strip() for x in args.languages.split(",") if x.strip())
        missing = [lang for lang in corpus or () if lang not in values["languages"]]
        if missing:
            raise ValueError(
                f"--languages {args.languages} lacks {','.join(missing)}, a language of the corpus {args.data} "
                f"({','.join(corpus or ())}); leave --languages out to take the corpus's"
            )
    values["origin_weights"] = tuple(_origin_weight(kv) for kv in args.origin_weights.split(",") if kv)
    return TrainConfig(**values)


def run(args: argparse.Namespace) -> int:
    """Train (or resume), then optionally export the shipped fp16 checkpoint."""
    try:
        cfg = config_from_args(args)
    except (ValueError, TypeError) as exc:
        print(f"transduce train: {exc}", file=sys.stderr)
        return 2
    data = Path(args.data)
    if not (data / "train.tsv").is_file() or not (data / "dev.tsv").is_file():
        print(
            f"transduce train: {data} has no train.tsv/dev.tsv (build it with `transduce data build`)", file=sys.stderr
        )
        return 1
    languages = corpus_languages(data)
    if languages is None or "en" not in languages:
        print(f"transduce train: {data / 'train.tsv'} has no origin<TAB>en<TAB>xx header", file=sys.stderr)
        return 1
    from transduce.training.interrupt import Interrupted
    from transduce.training.train import Trainer

    try:
        if args.export_fp16:  # checked before training, not found unwritable after it
            check_fp16_output(Path(args.export_fp16), Path(args.out), Path(cfg.init_from) if cfg.init_from else None)
        named: set[str] = getattr(args, "named_options", set())
        trainer = Trainer(data, args.out, cfg, progress=sys.stderr.isatty(), named=named)
    except (ValueError, OSError, RuntimeError) as exc:  # a corpus, checkpoint or tokenizer size that does not fit
        print(f"transduce train: {exc}", file=sys.stderr)
        return 1
    if trainer.ignored and trainer.rank == 0:  # said before the run (once, under torchrun), not found afterwards
        why = (
            f"resuming the run in {args.out}, which keeps its own options (train into another --out to change them)"
            if trainer.resumed
            else f"--init-from {cfg.init_from} decides the model's dimensions, languages and tokenizer"
        )
        print(f"transduce train: {why}: ignored {'; '.join(trainer.ignored)}", file=sys.stderr)
    try:
        summary = trainer.run()
    except Interrupted as exc:  # Ctrl-C: the step in progress finished and was saved
        print(f"transduce train: {exc}", file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:  # epochs that sample nothing, a full disk (the checkpoints saved stay)
        print(f"transduce train: {exc}", file=sys.stderr)
        return 1
    if args.export_fp16:
        from transduce.training.ship import ship_fp16

        try:
            summary["shipped"] = ship_fp16(Path(args.out), Path(args.export_fp16))
        except (ValueError, OSError) as exc:
            print(json.dumps(summary))
            print(f"transduce train: trained, but --export-fp16 failed: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(summary))
    return 0


RUN_FILES = ("last.pt", "average.pt", "tokenizer.model", "metrics.jsonl")  # and ckpt_step*.pt: what a run writes


def check_fp16_output(out: Path, run_dir: Path, init_from: Path | None = None) -> None:
    """ValueError when ``--export-fp16`` would land on the run's directory or a file the run reads or writes
    (``RUN_FILES``, a step checkpoint, the checkpoint it starts from) or cannot be a file in an existing or creatable
    directory."""
    target, run = resolved(out, what="--export-fp16"), resolved(run_dir, what="--out")
    if out.is_dir() or target == run:
        raise ValueError(f"--export-fp16 {out} is a directory: name the checkpoint file to write")
    if target.parent == run and (out.name in RUN_FILES or out.name.startswith("ckpt_step")):
        raise ValueError(f"--export-fp16 {out} is a file of the run itself: name another file")
    if init_from is not None:
        check_output(out, [init_from], what="--export-fp16")
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"--export-fp16 {out}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK):  # (a read-only file system was found only after the training)
        raise ValueError(f"--export-fp16 {out}: {parent} cannot be written")
