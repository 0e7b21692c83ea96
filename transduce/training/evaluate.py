"""``transduce eval``: translate a TSV test set through the ONNX engine (what is served) and score it with sacreBLEU."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from transduce.engine.manifest import spelt_as_known
from transduce.engine.options import MAX_BEAM_SIZE, SERVED_NO_REPEAT_NGRAM_SIZE, no_repeat_problem


@dataclass(frozen=True)
class EvalResult:
    """Scores of one direction on one test set (or one slice of it)."""

    source: str
    target: str
    origin: str
    sentences: int
    bleu: float
    chrf: float
    seconds: float

    def row(self) -> str:
        """A markdown table row."""
        return (
            f"| {self.origin} | {self.source}->{self.target} | {self.sentences} | {self.bleu:.1f} | {self.chrf:.1f} |"
        )


def read_tsv(path: str | Path, source: str, target: str) -> list[tuple[str, str, str]]:
    """(origin, source text, target text) rows of a TSV whose header names the language columns, or of a headerless
    ``NAME.xx-yy.tsv`` file whose two columns are languages xx and yy (the shared dev sets' format); without an
    origin column, the origin is the file name up to its first dot."""
    try:
        return _read_tsv(path, source, target)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except csv.Error as exc:  # (a cell over 131,072 characters was a traceback)
        raise ValueError(f"{path} cannot be read as tab-separated text: {exc}") from exc


def _read_tsv(path: str | Path, source: str, target: str) -> list[tuple[str, str, str]]:
    name = Path(path).name.lower()
    name_langs = name.rsplit(".", 2)[-2].split("-") if name.count(".") >= 2 else []
    source, target = source.lower(), target.lower()  # (codes in any case, as everywhere: "EN" was refused)
    with open(path, encoding="utf-8-sig", newline="") as f:  # (a byte-order mark had become part of the header)
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        first = next(reader, None)
        named = [cell.strip().lower() for cell in first or ()]
        if first is not None and source in named and target in named:
            header, rows = named, list(reader)
        elif first is not None and len(name_langs) == 2 and {source, target} <= set(name_langs):
            header, rows = name_langs, [first, *reader]
        else:
            raise ValueError(
                f"{path}: the header must name columns {source!r} and {target!r} (got {first}), or the file name "
                f"must end in .{source}-{target}.tsv for a headerless file"
            )
    si, ti = header.index(source), header.index(target)
    oi = header.index("origin") if "origin" in header else None
    stem = Path(path).name.split(".")[0]  # the origin of every row of a file without an origin column
    first_line = 2 if header is named else 1
    for n, row in enumerate(rows, first_line):
        if any(cell.strip() for cell in row) and len(row) != len(header):  # blank: skipped; ragged: refused
            raise ValueError(f"{path}: line {n} has {len(row)} columns, the header {len(header)}: fix or remove it")
    return [
        (row[oi] if oi is not None else stem, row[si], row[ti])
        for row in rows
        if len(row) == len(header) and any(cell.strip() for cell in row)  # a row of blanks is no test pair
    ]


def evaluate(
    model_dir: str | Path,
    tsv: str | Path,
    *,
    source: str,
    target: str,
    beam_size: int = 4,
    limit: int | None = None,
    by_origin: bool = True,
    device: str = "auto",
    progress: bool = True,
    batch_size: int = 64,
    no_repeat_ngram_size: int = SERVED_NO_REPEAT_NGRAM_SIZE,
) -> list[EvalResult]:
    """BLEU and chrF of the engine's translations; one result for all rows, plus one per origin if asked."""
    import sacrebleu
    from tqdm import tqdm

    from transduce.engine.options import DecodeOptions
    from transduce.engine.text import split_long
    from transduce.engine.translator import Translator

    rows = read_tsv(tsv, source, target)[:limit]
    if not rows:
        raise ValueError(f"{tsv} has no rows for {source}->{target}")
    # one hypothesis per distinct (origin, source); every row's target is a reference for it (the Bible test set
    # pairs each verse of 3 English editions with 2 German ones, so a verse has several references)
    refs: dict[tuple[str, str], list[str]] = {}
    for origin, src, tgt in rows:
        refs.setdefault((origin, src), []).append(tgt)
    items = list(refs)
    translator = Translator(model_dir, device=device, shared_pool=True)
    languages = {code for pair in translator.pairs for code in pair}
    source, target = spelt_as_known(languages, (source, target))  # codes in any case: "-s EN" was refused
    translator.check_pair(source, target)
    options = DecodeOptions(beam_size=beam_size, chunk_size=batch_size, no_repeat_ngram_size=no_repeat_ngram_size)
    hyps: list[str] = []
    limit, split = translator.max_source_tokens, 0
    started = time.monotonic()
    with tqdm(
        total=len(items), desc=f"eval {source}->{target}", unit=" sent", disable=not progress, file=sys.stderr
    ) as bar:
        for i in range(0, len(items), batch_size * 4):
            chunk = [src for _, src in items[i : i + batch_size * 4]]
            # a source longer than the model's positions is cut at clause marks or spaces and its parts'
            # translations joined, as the server does (never a crash, never a truncated source)
            parts = [split_long(src, lambda t: translator.count_tokens(t) <= limit) for src in chunk]
            split += sum(len(p) > 1 for p in parts)
            flat = [p.strip() for ps in parts for p in ps]
            best = iter(
                r.hypotheses[0]
                for r in translator.translate(flat, source_lang=source, target_lang=target, options=options)
            )
            hyps += [" ".join(next(best) for _ in ps) for ps in parts]
            bar.update(len(chunk))
    if split and progress:
        print(f"{split} source sentence(s) over the model's {limit} tokens were translated in parts", file=sys.stderr)
    seconds = time.monotonic() - started
    groups: dict[str, list[int]] = {"all": list(range(len(items)))}
    if by_origin:
        for i, (origin, _) in enumerate(items):
            groups.setdefault(origin, []).append(i)
        if len(groups) == 2:  # a single origin: "all" says it already
            groups.pop(next(k for k in groups if k != "all"))
    results = []
    for origin, idx in groups.items():
        h = [hyps[i] for i in idx]
        ref_lists = [refs[items[i]] for i in idx]
        width = max(len(r) for r in ref_lists)
        streams = [[r[k] if k < len(r) else r[0] for r in ref_lists] for k in range(width)]  # repeat to fill
        results.append(
            EvalResult(
                source,
                target,
                origin,
                len(idx),
                sacrebleu.corpus_bleu(h, streams).score,
                sacrebleu.corpus_chrf(h, streams).score,
                seconds,
            )
        )
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the eval command."""
    parser.add_argument("--model", default=None, help="ONNX model directory (default: the shipped model)")
    parser.add_argument(
        "--tsv",
        required=True,
        action="append",
        help="test set: TSV with a header naming language columns (and optionally 'origin' for per-source scores), "
        "or a headerless NAME.xx-yy.tsv; repeat it to score several sets with one model load",
    )
    parser.add_argument("--source", "-s", required=True, help="source language column, e.g. en")
    parser.add_argument("--target", "-t", required=True, help="target language column, e.g. de")
    parser.add_argument("--beam-size", type=int, default=4, help="beam size (1 = greedy)")
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=SERVED_NO_REPEAT_NGRAM_SIZE,
        help="never repeat a run of this many pieces (0 = off; the server's default)",
    )
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N rows (default: all)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run the model")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")


def run(args: argparse.Namespace) -> int:
    """Print a markdown table of BLEU/chrF (overall and per origin)."""
    from transduce.engine.errors import ModelLoadError
    from transduce.paths import check_file_target, check_output, replacing_file
    from transduce.shipped import resolve_model_dir

    problem = no_repeat_problem(args.no_repeat_ngram_size)
    if problem is not None:
        problem = f"--no-repeat-ngram-size {problem}"
    elif args.limit is not None and args.limit < 1:
        problem = f"--limit must be at least 1, got {args.limit}"
    elif not 1 <= args.beam_size <= MAX_BEAM_SIZE:  # (100,000 grew to 4.5 GB until killed)
        problem = f"--beam-size must be between 1 (greedy) and {MAX_BEAM_SIZE}, got {args.beam_size}"
    if problem is not None:  # a bad option: 2, as everywhere (a failed evaluation is 1)
        print(f"transduce eval: {problem}", file=sys.stderr)
        return 2
    results: list[EvalResult] = []
    try:
        if args.json:  # checked before the evaluation, not found unwritable after it
            check_output(args.json, args.tsv, what="--json")
            check_file_target(args.json, what="--json")
        for tsv in args.tsv:  # every set read before any is translated (a bad last one lost the scores before it)
            read_tsv(tsv, args.source, args.target)
        model_dir = resolve_model_dir(args.model)
        if args.json:
            check_output(args.json, [*Path(model_dir).iterdir()], what="--json")  # never a file of the model
        for tsv in args.tsv:
            scored = evaluate(
                model_dir,
                tsv,
                source=args.source,
                target=args.target,
                beam_size=args.beam_size,
                no_repeat_ngram_size=args.no_repeat_ngram_size,
                limit=args.limit,
                device=args.device,
                progress=sys.stderr.isatty(),
            )
            if len(args.tsv) > 1:  # say which set each "all" row is
                scored = [replace(r, origin=f"all ({Path(tsv).name})") if r.origin == "all" else r for r in scored]
            results += scored
    except (ModelLoadError, ValueError, OSError) as exc:
        print(f"transduce eval: {exc}", file=sys.stderr)
        return 1
    print("| origin | direction | sentences | BLEU | chrF |\n|---|---|---|---|---|")
    for r in results:
        print(r.row())
    if args.json:
        try:
            with replacing_file(args.json) as tmp:
                tmp.write_text(json.dumps([r.__dict__ for r in results], indent=2) + "\n")
        except OSError as exc:
            print(f"transduce eval: the results above could not be written to {args.json}: {exc}", file=sys.stderr)
            return 1
    return 0
