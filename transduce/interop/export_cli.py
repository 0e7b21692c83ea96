"""``transduce export-marian CHECKPOINT OUT``: a transduce checkpoint -> a Hugging Face MarianMTModel directory."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the export-marian command."""
    parser.add_argument("checkpoint", help="transduce checkpoint (.pt) to export")
    parser.add_argument(
        "out_dir",
        help="directory to write (config.json, model.safetensors, source/target.spm, vocab.json); "
        "convert it further with `ct2-transformers-converter --model OUT_DIR --output_dir CT2_DIR`",
    )


def run(args: argparse.Namespace) -> int:
    """Export and print a one-line JSON summary; errors are one line on stderr and exit status 1."""
    from transduce.interop.marian import report_dict
    from transduce.interop.marian_export import export_marian

    try:
        report = export_marian(args.checkpoint, args.out_dir)
    except (ValueError, OSError) as exc:
        print(f"transduce export-marian: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report_dict(report)))
    return 0
