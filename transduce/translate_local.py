"""``transduce translate`` through a model in this process: each input line translated as the server translates one
text of a ``format: "text"`` request, so a line comes out the same either way.

- Language codes are read as the server reads them: in any case (``EN``), ``auto`` detected line by line among the
  languages the model translates into the target, and a source equal to the target passes the line through.
- What the model cannot spell (other scripts, emoji, control characters) is kept as written, sent as placeholders
  (``Translator.unknown_runs``), not turned into " ⁇ " or dropped; a sentence whose translation kept only
  placeholders is translated once more without them (``plain_retry``), as the server does.
- A sentence without a letter is given back as it is, without decoding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from transduce.engine.options import DecodeOptions
from transduce.engine.text import Segmented, has_letters
from transduce.engine.translator import Translator
from transduce.service.detect import LanguageDetector, detector_for
from transduce.service.errors import ApiError
from transduce.service.glossary import TextWithTerms, mask_text
from transduce.service.placeholders import plain_retry
from transduce.service.validation import (
    AUTO,
    auto_candidates,
    check_route,
    kept_as_written,
    known_case,
    model_languages,
)

Item = Segmented | TextWithTerms


class LocalTranslation:
    """Lines of ``source`` (or ``"auto"``) translated into ``target`` by ``translator``; the language pair is checked
    when it is made (the engine's UnsupportedLanguageError, or ValueError for ``auto`` into a language the model
    does not produce)."""

    def __init__(self, translator: Translator, source: str, target: str, options: DecodeOptions) -> None:
        self.translator, self.options = translator, options
        self.source, self.target = known_case(translator, source, target)
        self._auto: tuple[LanguageDetector, list[str]] | None = None
        if self.source == AUTO:
            try:
                self._auto = auto_candidates(self.target, translator, detector_for(model_languages(translator)))
            except ApiError as exc:
                raise ValueError(exc.message) from None
        else:
            check_route(translator, self.source, self.target)

    def source_of(self, line: str) -> str:
        """The line's language: the one named, or the detected one."""
        if self._auto is None:
            return self.source
        detector, candidates = self._auto
        return detector.detect(line, candidates).language

    def __call__(self, lines: Sequence[str]) -> list[str]:
        """The translation of every line, in order (a line the engine refuses raises, e.g. InputTooLongError)."""
        sources = [self.source_of(line) for line in lines]
        items: list[Item | None] = [
            None if source == self.target else mask_text(line, runs=kept_as_written(self.translator.unknown_runs(line)))
            for line, source in zip(lines, sources, strict=True)
        ]
        done: dict[tuple[int, int], str] = {}
        todo: dict[str, list[tuple[tuple[int, int], str]]] = defaultdict(list)  # by source language
        for i, item in enumerate(items):
            for k, sentence in enumerate(item.sentences if item is not None else ()):
                if has_letters(sentence):
                    todo[sources[i]].append(((i, k), sentence))
                else:
                    done[i, k] = sentence.strip()  # as the engine gives it back
        for source, sentences in todo.items():
            translated = self._translate(source, [s for _, s in sentences])
            retry = [(j, plain) for j, (_, s) in enumerate(sentences) if (plain := plain_retry(s, translated[j]))]
            if retry:  # placeholders and no word back: once more without them (they are then placed by position)
                for (j, _), again in zip(retry, self._translate(source, [p for _, p in retry]), strict=True):
                    translated[j] = again
            done.update((key, text) for (key, _), text in zip(sentences, translated, strict=True))
        return [
            line if item is None else item.rejoin([done[i, k] for k in range(len(item.sentences))])
            for i, (line, item) in enumerate(zip(lines, items, strict=True))
        ]

    def _translate(self, source: str, sentences: list[str]) -> list[str]:
        results = self.translator.translate(
            sentences, source_lang=source, target_lang=self.target, options=self.options
        )
        return [r.hypotheses[0] for r in results]
