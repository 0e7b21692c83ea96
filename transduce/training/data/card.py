"""The data card as markdown (DATA.md), and the meaning of every filter it counts."""

from __future__ import annotations

from typing import Any

from transduce.training.data.clean import FILTERS
from transduce.training.data.languages import name as language_name
from transduce.training.data.reserved import Reserved

OVERLAP = "overlaps_own_dev_test"


def filter_meanings(reserved: Reserved, lang: str = "de") -> dict[str, str]:
    """Cleaning filters, one decontamination filter per reserved set, then the own dev/test overlap filter (the
    pair's other language named where the texts say German)."""
    other = language_name(lang)
    meanings = {name: text.replace("German", other) for name, text in FILTERS.items()}
    for name, read in reserved.read.items():
        meanings[name] = f"English or {other} side matches a text of {name} ({read['from']}), in any split"
    meanings[OVERLAP] = f"train pair whose English or {other} side matches a text of our own dev/test slices"
    return meanings


def _cell(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 300 else text[:300] + " ..."


def data_card_markdown(card: dict[str, Any]) -> str:
    """The data card as markdown."""
    sources = card["sources"]
    lang = card["pair"].split("-", 1)[1]
    lines = [
        f"# Parallel corpus {card['pair']}",
        "",
        f"Built with `{card['command']}`.",
        "",
        f"| source | status | train | dev | test | train tokens en / {lang} | licence |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in sources.items():
        sp = s["splits"]
        lines.append(
            f"| {name} | {s['status']} | {sp['train']['pairs']} | {sp['dev']['pairs']} | {sp['test']['pairs']} | "
            f"{sp['train']['tokens_en']} / {sp['train'][f'tokens_{lang}']} | {s['licence']} |"
        )
    sizes = card["splits"]
    lines += [
        f"| **all** | | {sizes['train']} | {sizes['dev']} | {sizes['test']} | | |",
        "",
        "Tokens are whitespace-separated words.",
        "",
        "## Origins (the first column of the TSV files; `transduce train --origin-weights` uses them)",
        "",
        "| origin | train | dev | test |",
        "|---|---|---|---|",
    ]
    lines += [f"| {o} | {c['train']} | {c['dev']} | {c['test']} |" for o, c in card["origins"].items()]
    lines += ["", "Origins ending in `-word` / `-label`: English side of fewer than 3 words (headwords, UI labels)."]
    if card["skipped"]:
        lines += ["", "## Skipped sources", ""]
        lines += [f"- {name}: {why}" for name, why in card["skipped"].items()]
    lines += [
        "",
        "## Held-out data and decontamination",
        "",
        f"- Bible: {card['held_out']['bible']}; holdout chapters are excluded when reading and are in no file.",
        f"- Other sources: {card['held_out']['others']}.",
        f"- Texts compared after normalisation: {card['decontamination']['match']}.",
    ]
    for name, read in card["decontamination"]["reserved"].items():
        lines.append(
            f"- Kept out of every split: `{name}` ({read['from']}; {read['texts_en']} English and "
            f"{read[f'texts_{lang}']} {language_name(lang)} texts)."
        )
    for name, why in card["decontamination"]["unavailable"].items():
        lines.append(f"- Not checked (not readable here): `{name}`: {why}.")
    lines += [
        "- Train pairs matching a text of our own dev/test slices removed: "
        f"{card['removed_train_overlapping_dev_test']}.",
        "",
        "## Filters (pairs removed per source)",
        "",
    ]
    filters = list(card["filters"])
    lines += ["| source | " + " | ".join(filters) + " |", "|---|" + "---|" * len(filters)]
    for name, s in sources.items():
        removed = s.get("removed", {})
        lines.append(f"| {name} | " + " | ".join(str(removed.get(f, 0)) for f in filters) + " |")
    lines += ["", "| filter | meaning |", "|---|---|"]
    lines += [f"| {f} | {meaning} |" for f, meaning in card["filters"].items()]
    lines += ["", "## Sources", ""]
    for name, s in sources.items():
        lines += [f"### {name}", "", f"- licence: {s['licence']}"]
        for key, value in s.items():
            if key in ("licence", "splits", "removed", "status"):
                continue
            if key in ("editions", "editions_not_used"):
                what = "edition" if key == "editions" else "edition not used"
                for code, e in value.items():
                    lines.append(f"- {what} `{code}`: {e['name']} ({e['language']}): {e['licence']}")
                continue
            if isinstance(value, list | dict) and len(value) > 12:
                items = list(value.items() if isinstance(value, dict) else value)
                value = ", ".join(map(str, items[:12])) + f", ... ({len(items)} in all)"
            lines.append(f"- {key.replace('_', ' ')}: {_cell(value)}")
        lines.append("")
    return "\n".join(lines)
