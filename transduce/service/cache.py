"""The translation cache: an LRU of sentence translations keyed by the sentence, the language pair and every
search option, so a repeated UI string is not decoded again and a result is never reused for other options."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from transduce.engine.options import DecodeOptions
from transduce.engine.results import TranslationResult

CacheKey = tuple[str, str, DecodeOptions, str]  # (source, target, options, sentence)


@dataclass
class CacheStats:
    """Lookups since start-up."""

    hits: int = 0
    misses: int = 0

    @property
    def hit_ratio(self) -> float:
        """Hits over lookups (0 before the first lookup)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


CHARS_PER_ENTRY = 400  # characters a cache entry holds on average (its sentence and hypotheses): size x this at most


def _chars(key: CacheKey, result: TranslationResult) -> int:
    return len(key[3]) + sum(map(len, result.hypotheses))


class TranslationCache:
    """At most ``size`` sentence translations, and ``size * CHARS_PER_ENTRY`` characters of them (a long sentence
    with its alternatives takes the room of several), least recently used evicted first; ``size`` 0 disables it.
    The texts alone are kept: the token ids beside them took 36 bytes a token (a long sentence at beam 8 with 5
    alternatives: 114 KB an entry, 1.1 GB for a full cache).

    Used from the event loop only (no lock needed)."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"cache size must be >= 0 (0 = off), got {size}")
        self.size = size
        self.stats = CacheStats()
        self._entries: OrderedDict[CacheKey, TranslationResult] = OrderedDict()
        self._chars = 0  # held by the entries (``_chars``)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> TranslationResult | None:
        """The cached translation for ``key``, counted as a hit or a miss (None when off or absent)."""
        if not self.size:
            return None
        result = self._entries.get(key)
        if result is None:
            self.stats.misses += 1
            return None
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return result

    def put(self, key: CacheKey, result: TranslationResult) -> None:
        """Remember a translation, evicting the least recently used beyond ``size``."""
        if not self.size:
            return
        kept = TranslationResult(hypotheses=list(result.hypotheses), tokens=[], scores=list(result.scores))
        if (old := self._entries.pop(key, None)) is not None:
            self._chars -= _chars(key, old)
        if _chars(key, kept) > self.size * CHARS_PER_ENTRY // 2:  # it would push out the rest (and then itself)
            return
        self._entries[key] = kept
        self._chars += _chars(key, kept)
        while len(self._entries) > self.size or self._chars > self.size * CHARS_PER_ENTRY:
            gone_key, gone = self._entries.popitem(last=False)
            self._chars -= _chars(gone_key, gone)
