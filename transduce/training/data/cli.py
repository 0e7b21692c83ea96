"""``transduce data build [--pair en-de|en-fr|...] OUT_DIR [--work-dir DIR] [--sources bible,ding,...]
[--git NAME=PATH ...] [--shared-data DIR]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transduce.training.data.build import PAIRS, SOURCES
from transduce.training.data.gitrepo import REPOS
from transduce.training.data.shared import ENV


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the data command."""
    parser.add_argument(
        "action", choices=["build"], help="what to do; build: download the sources, clean, split and write the corpus"
    )
    parser.add_argument(
        "out_dir",
        metavar="OUT_DIR",
        help="output folder for train.tsv, dev.tsv, test.tsv, DATA.md, data_card.json and READY "
        "(replaced as a whole when the build succeeds)",
    )
    parser.add_argument(
        "--pair", default="en-de", help=f"language pair, one of {', '.join(PAIRS)} (default: %(default)s)"
    )
    parser.add_argument(
        "--work-dir",
        default=None,
        metavar="DIR",
        help="download/extraction cache, reused by later builds (default: OUT_DIR-work beside OUT_DIR)",
    )
    parser.add_argument(
        "--sources",
        default=None,
        help=f"comma-separated subset of the sources {','.join(SOURCES)} (default: all of them)",
    )
    parser.add_argument(
        "--git",
        action="append",
        default=None,
        metavar="NAME=PATH",
        help="a local copy (bare mirror, clone or folder) of a source repository; repeatable. NAME is one of "
        + ", ".join(REPOS)
        + " (clone commands: docs/data.md); sources whose repositories are not given are skipped "
        "(default: none)",
    )
    parser.add_argument(
        "--shared-data",
        default=None,
        metavar="DIR",
        help=f"folder with bible-split.json and dev/*.tsv (default: ${ENV}, else shared/data beside the repository)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars on stderr (default: progress bars shown)",
    )


def run(args: argparse.Namespace) -> int:
    """Build the corpus; a one-line error and exit status 2 (bad input) or 1 (failure), no traceback."""
    from transduce.training.data import shared
    from transduce.training.data.build import build_corpus, validate
    from transduce.training.data.gitrepo import parse_git_options

    args.pair = args.pair.strip().lower()  # codes in any case, as every other command reads them ("EN-DE")
    sources = [s.strip() for s in args.sources.split(",") if s.strip()] if args.sources is not None else None
    shared_data = getattr(args, "shared_data", None)
    try:
        git = parse_git_options(getattr(args, "git", None))
        validate(args.pair, sources, git)
        shared.require(shared_data)
    except ValueError as exc:
        print(f"transduce data: error: {exc}", file=sys.stderr)
        return 2
    try:
        card = build_corpus(
            args.pair,
            Path(args.out_dir),
            work_dir=Path(args.work_dir) if args.work_dir else None,
            sources=sources,
            git=git,
            shared_data=Path(shared_data) if shared_data else None,
            progress=not getattr(args, "no_progress", False),
        )
    except (ValueError, OSError) as exc:
        print(f"transduce data: error: {exc}", file=sys.stderr)
        return 1
    for name, why in card["skipped"].items():
        print(f"skipped {name}: {why}", file=sys.stderr)
    print(f"wrote {args.out_dir}: " + ", ".join(f"{k} {v} pairs" for k, v in card["splits"].items()))
    return 0
