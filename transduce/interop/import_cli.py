"""``transduce import-marian HF_DIR OUT``: a Hugging Face Marian / OPUS-MT directory -> a transduce checkpoint."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the import-marian command."""
    parser.add_argument(
        "hf_dir", help="MarianMTModel directory (config.json, weights, source.spm, target.spm, vocab.json)"
    )
    parser.add_argument("out", help="checkpoint file to write (.pt); export it with `transduce export`")
    parser.add_argument("--source-lang", default=None, help="source language (default: tokenizer_config.json or name)")
    parser.add_argument("--target-lang", default=None, help="target language (default: tokenizer_config.json or name)")
    parser.add_argument("--name", default=None, help="model name stored in the checkpoint (default: directory name)")
    parser.add_argument(
        "--ban-pad",
        action="store_true",
        help="never generate <pad> (as OPUS-MT's bad_words_ids=[[pad]] in transformers); other tokens' log-probs "
        "then differ from transformers' by log(1 - p(pad))",
    )


def run(args: argparse.Namespace) -> int:
    """Convert and print a one-line JSON summary; errors are one line on stderr: exit status 2 for a bad option,
    1 for a conversion that failed."""
    from transduce.interop.marian import LANGUAGE_CODE, import_marian, report_dict

    for flag, code in (("--source-lang", args.source_lang), ("--target-lang", args.target_lang)):
        if code is not None and not LANGUAGE_CODE.fullmatch(code):
            print(
                f"transduce import-marian: {flag} {code!r} is not a language code such as en, de or pt-BR",
                file=sys.stderr,
            )
            return 2
    try:
        report = import_marian(
            args.hf_dir,
            args.out,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            name=args.name,
            ban_pad=args.ban_pad,
        )
    except (ValueError, OSError) as exc:
        print(f"transduce import-marian: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report_dict(report)))
    return 0
