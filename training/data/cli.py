"""``transduce data build --pair en-de OUT_DIR [--work-dir DIR] [--sources bible,ding,...]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from training.data.build import PAIRS, SOURCES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the data command."""
    parser.add_argument("action", choices=["build"],
                        help="what to do; build: download the sources, clean, split and write the corpus")
    parser.add_argument("out_dir", metavar="OUT_DIR",
                        help="output folder for train.tsv, dev.tsv, test.tsv, DATA.md, data_card.json and READY "
                             "(replaced as a whole when the build succeeds)")
    # "%(default).0s" renders as nothing; it only tells ArgumentDefaultsHelpFormatter (used by `transduce`) that the
    # default is already spelled out, so it is not repeated as "(default: None)".
    parser.add_argument("--pair", default="en-de",
                        help=f"language pair, one of {', '.join(PAIRS)} (default: %(default)s)")
    parser.add_argument("--work-dir", default=None, metavar="DIR",
                        help="download/extraction cache, reused by later builds "
                             "(default: OUT_DIR-work beside OUT_DIR%(default).0s)")
    parser.add_argument("--sources", default=None,
                        help=f"comma-separated subset of the sources {','.join(SOURCES)} "
                             "(default: all of them%(default).0s)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars on stderr (default: progress bars shown%(default).0s)")


def run(args: argparse.Namespace) -> int:
    """Build the corpus; a one-line error and exit status 2 (bad input) or 1 (failure), no traceback."""
    from training.data.build import build_corpus, validate

    sources = [s.strip() for s in args.sources.split(",") if s.strip()] if args.sources is not None else None
    try:
        validate(args.pair, sources)
    except ValueError as exc:
        print(f"transduce data: error: {exc}", file=sys.stderr)
        return 2
    try:
        card = build_corpus(args.pair, Path(args.out_dir), work_dir=Path(args.work_dir) if args.work_dir else None,
                            sources=sources, progress=not getattr(args, "no_progress", False))
    except (ValueError, OSError) as exc:
        print(f"transduce data: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out_dir}: " + ", ".join(f"{k} {v} pairs" for k, v in card["splits"].items()))
    return 0
