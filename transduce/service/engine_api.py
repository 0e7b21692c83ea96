"""What the service needs of the engine's ``Translator`` (tests pass a fake that implements the same)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from transduce.engine.options import DecodeOptions
from transduce.engine.results import TranslationResult
from transduce.service.config import Settings


class TranslatorLike(Protocol):
    """The subset of ``transduce.engine.translator.Translator`` the service calls."""

    @property
    def model_name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def pairs(self) -> list[tuple[str, str]]: ...

    @property
    def max_source_tokens(self) -> int: ...

    def check_pair(self, source_lang: str, target_lang: str) -> None: ...

    def count_tokens(self, text: str) -> int: ...

    def translate(
        self, texts: Sequence[str], *, source_lang: str, target_lang: str, options: DecodeOptions = ...
    ) -> list[TranslationResult]: ...


TranslatorFactory = Callable[[Settings], TranslatorLike]  # builds the translator in the app's lifespan
