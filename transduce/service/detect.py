"""Language detection for ``source: "auto"`` and ``POST /detect``: py3langid's bundled model (no download at run
time), restricted to the languages the translation model knows.

How a text is scored: the text, padded with a space on each side (the model's byte n-grams include word
boundaries, so a lone word gets features it would not have otherwise), is ranked by the naive-Bayes model with
probabilities normalised over the candidate languages only. A short text (up to ``SHORT_CHARS`` characters) is
also ranked lower-cased and the two distributions are averaged: capitals at the start of a sentence hide English
function words ("Two") from the model, while German capitalises its nouns, so neither form alone is best. Only the
first ``MAX_DETECT_CHARS`` characters are read: the answer has long settled by then.

Confidence is LibreTranslate's 0-100 scale, measured from chance: 0 means the model saw no evidence at all (each of
the k candidates at 1/k), 100 that it is certain. Symbols and emoji are read as spaces (``_without_symbols``), so a
text of them, numbers and punctuation has no evidence. A word the model has no features for ("The", a number) gets
confidence 0 rather than a confident guess; the language is still picked among the candidates, ties going to the
first one in the order the caller gives (``/translate`` lists the target language last, so a text with no evidence
is translated rather than passed through).

Model codes map to the detector's by their primary subtag ("pt-BR" -> "pt"); codes sharing a subtag split its
probability equally (the detector cannot tell them apart); a code the detector does not know is never detected.
The model (~53 MB in memory) is loaded on first use, off the event loop (``get_detector``), and kept for the
model's language set.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from transduce.engine.text import has_letters

MAX_DETECT_CHARS = 1000  # characters of a text that are read

SHORT_CHARS = 32  # texts up to this long are also ranked lower-cased


@dataclass(frozen=True)
class Detection:
    """One candidate language of a text: its code (the translation model's) and the confidence, 0-100."""

    language: str
    confidence: float


def detector_label(code: str, labels: Iterable[str]) -> str | None:
    """The detector's label for a model language code ("en", "pt-BR" -> "pt"), or None if it has none."""
    known = set(labels)
    primary = code.replace("_", "-").split("-", 1)[0].lower()
    if code in known:
        return code
    return primary if primary in known else None


def confidence(probability: float, k: int) -> float:
    """LibreTranslate's 0-100 confidence for a candidate of probability ``probability`` among ``k``: 0 at chance
    (1/k) or below, 100 at certainty. With a single candidate nothing was compared: 0."""
    if k < 2:
        return 0.0
    chance = 1.0 / k
    return round(max(0.0, min(1.0, (probability - chance) / (1.0 - chance))) * 100.0, 1)


class LanguageDetector:
    """py3langid's model restricted to ``languages`` (translation-model codes); thread-safe once built."""

    def __init__(self, languages: Iterable[str]) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        full = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.labels: dict[str, str] = {}  # model code -> detector label, for the codes the detector knows
        for code in sorted(set(languages)):
            label = detector_label(code, full.labels)
            if label is not None:
                self.labels[code] = label
        # keep the columns of the model's languages only (the full tables are ~30 MB more); the byte automaton
        # is shared
        used = set(self.labels.values())
        columns = [i for i, label in enumerate(full.nb_classes) if label in used]
        self._base: Any = LanguageIdentifier(
            full.nb_ptc[:, columns],
            full.nb_pc[columns],
            [full.nb_classes[i] for i in columns],
            full.tk_nextmove,
            full.tk_output,
            norm_probs=True,
            tk_row=full.tk_row,
        )
        self._subsets: dict[frozenset[str], Any] = {}
        self._lock = threading.Lock()

    @property
    def languages(self) -> list[str]:
        """The model codes this detector can answer, sorted."""
        return sorted(self.labels)

    def _identifier(self, labels: frozenset[str]) -> Any:
        """The model normalised over ``labels`` (cached: one per candidate set, a few hundred kB each)."""
        with self._lock:
            found = self._subsets.get(labels)
            if found is None:
                found = copy.copy(self._base)
                found.set_languages(sorted(labels))
                self._subsets[labels] = found
        return found

    def rank(self, text: str, candidates: Sequence[str]) -> list[Detection]:
        """Every candidate the detector knows, most likely first (ties in ``candidates`` order)."""
        codes = [c for c in dict.fromkeys(candidates) if c in self.labels]
        if not codes:
            return []
        groups: dict[str, list[str]] = {}
        for code in codes:
            groups.setdefault(self.labels[code], []).append(code)
        probabilities = self._probabilities(text, frozenset(groups))
        share = {code: probabilities.get(label, 0.0) / len(group) for label, group in groups.items() for code in group}
        order = sorted(range(len(codes)), key=lambda i: -share[codes[i]])
        return [Detection(codes[i], confidence(share[codes[i]], len(codes))) for i in order]

    def detect(self, text: str, candidates: Sequence[str]) -> Detection:
        """The most likely candidate; ValueError when the detector knows none of them."""
        ranked = self.rank(text, candidates)
        if not ranked:
            raise ValueError(f"the detector knows none of {list(candidates)}")
        return ranked[0]

    def _probabilities(self, text: str, labels: frozenset[str]) -> dict[str, float]:
        if len(labels) == 1:
            return dict.fromkeys(labels, 1.0)
        text = _without_symbols(text[:MAX_DETECT_CHARS]).strip()
        if not has_letters(text):  # numbers, punctuation, emoji: no evidence of any language
            return dict.fromkeys(labels, 1.0 / len(labels))
        identifier = self._identifier(labels)
        forms = [f" {text} "]
        if len(text) <= SHORT_CHARS and text.lower() != text:
            forms.append(f" {text.lower()} ")
        total: dict[str, float] = dict.fromkeys(labels, 0.0)
        for form in forms:
            for label, p in identifier.rank(form):
                total[label] += float(p) / len(forms)
        return total


def detect_order(languages: Iterable[str]) -> list[str]:
    """``POST /detect``'s candidates in the order ties are broken: English first, then sorted, so a text without
    evidence (emoji, numbers) is English at confidence 0, as LibreTranslate answers (the first code, "de", had
    tagged such posts German). ``source: "auto"`` orders its own: the target last, so such a text is translated."""
    return sorted(languages, key=lambda code: (code.split("-")[0].lower() != "en", code))


_NOT_LANGUAGE = frozenset({"Sm", "Sc", "Sk", "So", "Cc", "Cf", "Co", "Cs", "Cn"})  # Unicode general categories
_JOINERS = frozenset("\u200c\u200d")  # zero-width non-joiner and joiner: format characters of Persian, Indic words


def _without_symbols(text: str) -> str:
    """``text`` with symbols (emoji, arrows, currency signs), variation selectors and control, format (the tags of
    a flag emoji), private-use or unassigned characters as spaces, but for the zero-width joiners of Persian and Indic
    words: they say nothing of a language, and the model's byte n-grams of them are noise ("😀😀 👍" came out
    German, at 20 % confidence)."""
    return "".join(
        " " if (unicodedata.category(c) in _NOT_LANGUAGE and c not in _JOINERS) or "\ufe00" <= c <= "\ufe0f" else c
        for c in text
    )


_detectors: OrderedDict[frozenset[str], LanguageDetector] = OrderedDict()  # a process serves one model; tests swap
_detectors_lock = threading.Lock()


def detector_for(languages: Iterable[str]) -> LanguageDetector:
    """The detector for a model's languages: built once per language set (blocking, ~0.6 s), the last two kept."""
    key = frozenset(languages)
    with _detectors_lock:
        found = _detectors.get(key)
        if found is None:
            found = _detectors[key] = LanguageDetector(key)
            while len(_detectors) > 2:
                _detectors.popitem(last=False)
        _detectors.move_to_end(key)
        return found


async def get_detector(languages: Iterable[str]) -> LanguageDetector:
    """``detector_for`` without blocking the event loop while the model loads."""
    key = frozenset(languages)
    found = _detectors.get(key)
    return found if found is not None else await asyncio.to_thread(detector_for, key)
