"""``transduce <command>``: only the chosen command's module is imported, so `serve` never loads torch."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from transduce.shipped import ModelUnavailableError

# command -> (module with add_arguments(parser) and run(args) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("transduce.serve_cli", "serve a model over HTTP (LibreTranslate-compatible API, web page at /)"),
    "health": ("transduce.health_cli", "ask a running server whether it is ready (a container's health check)"),
    "translate": ("transduce.translate_cli", "translate files or stdin line by line, with a model dir or a server"),
    "export": ("transduce.export.cli", "export a checkpoint to an ONNX model directory and verify it against PyTorch"),
    "data": (
        "transduce.training.data.cli",
        "build a parallel corpus from packaged sources (data build --pair en-de OUT)",
    ),
    "train": ("transduce.training.cli", "train a Transformer on a corpus built by `transduce data build`"),
    "shortlist": (
        "transduce.training.shortlist",
        "build a model's vocabulary shortlist table from its corpus (co-occurrence; the CPU engine's fast path)",
    ),
    "eval": ("transduce.training.evaluate", "translate a TSV test set through the ONNX engine and print BLEU and chrF"),
    "import-marian": (
        "transduce.interop.import_cli",
        "convert a Hugging Face MarianMTModel (OPUS-MT) directory to a checkpoint",
    ),
    "export-marian": (
        "transduce.interop.export_cli",
        "write a checkpoint as a Hugging Face Marian directory (for CTranslate2)",
    ),
    "bench": ("transduce.bench.cli", "benchmarks: engines side by side, or the service under load"),
}

QUIET = {"translate", "eval"}
# optional dependencies by top-level module -> the extra that installs them
OPTIONAL_MODULES = {
    "torch": "torch",
    "onnx": "torch",
    "onnxscript": "torch",
    "sacrebleu": "torch",
    "transformers": "bench",
    "ctranslate2": "bench",
    "safetensors": "bench",
}


class DefaultsOnce(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help unless its text already names the default or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        no_default = action.default in (None, False, "", argparse.SUPPRESS)
        if "default" in text or no_default or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class OneLineErrors(argparse.ArgumentParser):
    """A bad option is one line on stderr and exit status 2 (argparse prints its whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    """The installed package's version (pyproject.toml's, as pip installed it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transduce")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def _top_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="transduce",
        description="transduce: a machine-translation server (Transformer -> ONNX -> onnxruntime).",
        epilog="Run `transduce COMMAND --help` for the options of a command; `transduce --version` for the version.",
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
    if argv[0] in ("-V", "--version"):
        print(f"transduce {_version()}")
        return 0
    if argv[0] not in COMMANDS:
        top.error(f"unknown command {argv[0]!r} (choose from {', '.join(sorted(COMMANDS))})")
    name, rest = argv[0], argv[1:]
    module_name, text = COMMANDS[name]
    if name == "serve":  # a SIGHUP while the server imports and loads must not stop it (serve_cli handles it later)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        module = importlib.import_module(module_name)
        parser = OneLineErrors(prog=f"transduce {name}", description=text, formatter_class=DefaultsOnce)
        module.add_arguments(parser)
        args = parser.parse_args(rest)
        quiet = name in QUIET  # their stdout/stderr are for translations and one-line errors only
        logging.basicConfig(
            level=logging.WARNING if quiet else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        return int(module.run(args) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("transduce."):  # e.g. the serving image ships the engine and service only
            print(f"transduce {name}: not part of this installation ({exc.name} is missing)", file=sys.stderr)
            return 1
        hint = install_hint(exc)
        if hint is None:
            raise
        print(f"transduce {name}: needs {exc.name}, which is not installed: {hint}", file=sys.stderr)
        return 1
    except ModelUnavailableError as exc:  # no --model, and the shipped model cannot be exported here
        print(f"transduce {name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"transduce {name}: interrupted", file=sys.stderr)
        return 130


def install_hint(exc: ModuleNotFoundError) -> str | None:
    """What to install for a missing optional dependency (None: not one of ours, a real bug)."""
    from transduce.shipped import TORCH_INSTALL

    extra = OPTIONAL_MODULES.get((exc.name or "").split(".")[0])
    if extra == "torch":
        return TORCH_INSTALL
    if extra == "bench":
        return "pip install 'transduce[bench]' (PyTorch's CPU build: add --extra-index-url https://download.pytorch.org/whl/cpu)"
    return None


if __name__ == "__main__":
    raise SystemExit(main())
