"""``transduce <command>``: only the chosen command's module is imported, so `serve` never loads torch."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# command -> (module with add_arguments(parser) and run(args) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("service.cli", "serve a model over HTTP (LibreTranslate-compatible API, web page at /)"),
    "translate": ("transduce.translate_cli", "translate files or stdin line by line, with a model dir or a server"),
    "export": ("export.cli", "export a checkpoint to an ONNX model directory and verify it against PyTorch"),
    "data": ("training.data.cli", "build a parallel corpus from packaged sources (data build --pair en-de OUT)"),
    "train": ("training.cli", "train a Transformer on a corpus built by `transduce data build`"),
    "eval": ("training.evaluate", "translate a TSV test set through the ONNX engine and print BLEU and chrF"),
    "import-marian": ("interop.import_cli", "convert a Hugging Face MarianMTModel (OPUS-MT) directory to a checkpoint"),
    "export-marian": ("interop.export_cli", "write a checkpoint as a Hugging Face Marian directory (for CTranslate2)"),
    "bench": ("bench.cli", "benchmarks: engines side by side, or the service under load"),
}

QUIET = {"translate", "eval"}


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transduce",
        description="transduce: a machine-translation server (Transformer -> ONNX -> onnxruntime).",
        epilog="Run `transduce COMMAND --help` for the options of a command.",
    )
    parser.add_argument(
        "command",
        choices=sorted(COMMANDS),
        metavar="COMMAND",
        help="; ".join(f"{name}: {text}" for name, (_, text) in COMMANDS.items()),
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        top.error(f"unknown command {argv[0]!r} (choose from {', '.join(sorted(COMMANDS))})")
    name, rest = argv[0], argv[1:]
    module_name, text = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(
            f"transduce {name}: not available in this installation ({exc}); install the [torch] or [bench] extra",
            file=sys.stderr,
        )
        return 2
    parser = argparse.ArgumentParser(
        prog=f"transduce {name}", description=text, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    quiet = name in QUIET  # their stdout/stderr are for translations and one-line errors only
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print(f"transduce {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
