"""Language detection accuracy and speed (a benchmark, not a test): the service's detector on the dev sets.

    python -m transduce.bench.detection [--shared-data DIR] [--languages en,de]

Each dev-set line (English<TAB>German) gives, per language, a long input (the whole sentence) and short ones (its
first 1, 2 and 3 words). Every input is detected among ``--languages`` as ``POST /detect`` does (candidates in
``detect_order``: a text without evidence is English). Printed per language and length: accuracy, the share
of answers with confidence under ``--low`` (detection saying it is unsure), and the error rate of the answers at or
above it (confident mistakes); then the time per call on short and long inputs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from transduce.service.detect import LanguageDetector, detect_order, detector_for

COLUMNS = {"en": 0, "de": 1}  # dev-set column of each language
LENGTHS: tuple[int | None, ...] = (1, 2, 3, None)  # first n words; None = the whole sentence


def read_pairs(folder: Path) -> list[tuple[str, str]]:
    """(English, German) of every line of every dev set in ``folder``."""
    pairs = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            en, _, de = line.partition("\t")
            if en.strip() and de.strip():
                pairs.append((en.strip(), de.strip()))
    return pairs


def inputs(pairs: Sequence[tuple[str, str]], language: str, words: int | None) -> list[str]:
    """The texts of one language: whole sentences, or their first ``words`` words."""
    texts = [pair[COLUMNS[language]] for pair in pairs]
    return texts if words is None else [" ".join(t.split()[:words]) for t in texts]


def score(detector: LanguageDetector, texts: Sequence[str], language: str, candidates: list[str], low: float) -> str:
    """One table row: accuracy, share of low-confidence answers, error rate of the confident ones."""
    answers = [detector.detect(t, candidates) for t in texts]
    right = sum(a.language == language for a in answers)
    confident = [a for a in answers if a.confidence >= low]
    wrong_confident = sum(a.language != language for a in confident)
    return (
        f"{100 * right / len(answers):8.1f} % | {100 * (len(answers) - len(confident)) / len(answers):8.1f} % | "
        f"{100 * wrong_confident / max(1, len(confident)):8.2f} %"
    )


def per_call_us(detector: LanguageDetector, texts: Sequence[str], candidates: list[str], repeats: int = 3) -> float:
    """Median over ``repeats`` runs of the mean microseconds per detect call."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        for text in texts:
            detector.detect(text, candidates)
        runs.append((time.perf_counter() - started) / len(texts) * 1e6)
    return statistics.median(runs)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the accuracy table and the timings; exit 1 without the dev sets."""
    from transduce.training.data.shared import DEV_DIR, shared_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared-data", default=None, help="folder with dev/*.tsv (default: the project's)")
    parser.add_argument("--languages", default="en,de", help="candidate languages (the model's), comma-separated")
    parser.add_argument("--low", type=float, default=50.0, help="confidence under which an answer counts as unsure")
    args = parser.parse_args(argv)
    folder = shared_dir(args.shared_data) / DEV_DIR
    pairs = read_pairs(folder)
    if not pairs:
        print(f"no dev sets (*.tsv) in {folder}", file=sys.stderr)
        return 1
    candidates = detect_order(args.languages.split(","))
    started = time.perf_counter()
    detector = detector_for(candidates)
    print(f"detector loaded in {time.perf_counter() - started:.2f} s; {len(pairs)} sentence pairs from {folder}")
    print(f"\n| language | input | accuracy | confidence < {args.low:g} | wrong among confident |")
    print("|---|---|---|---|---|")
    for language in COLUMNS:
        for words in LENGTHS:
            name = "sentence" if words is None else f"first {words} word{'s' * (words > 1)}"
            row = score(detector, inputs(pairs, language, words), language, candidates, args.low)
            print(f"| {language} | {name} | {row} |")
    short = [t for lang in COLUMNS for n in (1, 2, 3) for t in inputs(pairs, lang, n)][:3000]
    long = [t for lang in COLUMNS for t in inputs(pairs, lang, None)][:3000]
    longest = " ".join(long)[:5000]
    timings = {
        "short (1-3 words)": per_call_us(detector, short, candidates),
        f"sentence ({statistics.mean(map(len, long)):.0f} characters on average)": per_call_us(
            detector, long, candidates
        ),
        "5,000 characters": per_call_us(detector, [longest] * 20, candidates),
    }
    print("\ntime per call: " + ", ".join(f"{name} {us:.0f} us" for name, us in timings.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
