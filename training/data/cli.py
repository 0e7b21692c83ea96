"""``transduce data build --pair en-de OUT_DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the data command."""
    parser.add_argument("action", choices=["build"], help="what to do (build: download, clean, split, write)")
    parser.add_argument("out_dir", help="output directory for train.tsv, dev.tsv, test.tsv, DATA.md, data_card.json")
    parser.add_argument("--pair", default="en-de", help="language pair")
    parser.add_argument("--work-dir", default=None, help="download/extract cache (default: OUT_DIR-work beside it)")
    parser.add_argument("--sources", default=None,
                        help="comma-separated subset of sources (default: all of bible, ding, gettext, debian)")


def run(args: argparse.Namespace) -> int:
    """Build; one-line error and exit 1 on bad input."""
    from training.data.build import build_corpus

    sources = [s.strip() for s in args.sources.split(",")] if args.sources else None
    try:
        card = build_corpus(args.pair, Path(args.out_dir), work_dir=Path(args.work_dir) if args.work_dir else None,
                            sources=sources, progress=sys.stderr.isatty())
    except (ValueError, OSError) as exc:
        print(f"transduce data: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out_dir}: splits {card['splits']} in {card['seconds']} s")
    return 0
