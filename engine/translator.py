"""Translator: text or token ids in, translations out, through the exported ONNX graphs (no torch)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import InputTooLongError, ModelLoadError, UnsupportedLanguageError
from engine.manifest import load_manifest
from engine.options import DecodeOptions
from engine.search import BeamSearch, GreedySearch, Hypothesis, SearchStrategy
from engine.session import OnnxSeq2Seq
from engine.text import split_sentences
from model.tokenizer import Tokenizer

log = logging.getLogger("transduce.engine")


@dataclass(frozen=True)
class TranslationResult:
    """The n-best list of one input, best first; ``scores`` is empty unless ``return_scores`` was set."""

    hypotheses: list[str]
    tokens: list[list[int]]
    scores: list[float] = field(default_factory=list)


@dataclass
class EngineStats:
    """Counters the service exports as metrics; updated under a lock by whoever translates."""

    batches: int = 0
    sentences: int = 0
    source_tokens: int = 0
    padded_source_tokens: int = 0
    generated_tokens: int = 0
    decoder_steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def _unless_identity(index: np.ndarray, n: int) -> np.ndarray | None:
    """``index`` (a gather along axis 0 of n rows), or None when it keeps every row in place."""
    if len(index) == n and np.array_equal(index, np.arange(n)):
        return None
    return index


class Translator:
    """Loads an ONNX model directory (CUDA when usable, else CPU) and translates batches of sentences."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        device: str = "auto",
        intra_threads: int = 0,
        inter_threads: int = 1,
        strict_device: bool = False,
    ) -> None:
        self.manifest = load_manifest(model_dir)
        m = self.manifest
        try:
            self.tokenizer = Tokenizer(m.path("tokenizer"), target_tag=m.target_tag, languages=m.languages)
        except ValueError as exc:
            raise ModelLoadError(f"tokenizer of {model_dir} does not fit its manifest: {exc}") from exc
        if self.tokenizer.vocab_size != m.vocab_size or self.tokenizer.eos_id != m.eos_id:
            raise ModelLoadError(
                f"tokenizer of {model_dir} ({self.tokenizer.vocab_size} pieces, eos "
                f"{self.tokenizer.eos_id}) does not match the manifest ({m.vocab_size} pieces, "
                f"eos {m.eos_id}): re-export the model"
            )
        self.model = OnnxSeq2Seq(
            m, device=device, intra_threads=intra_threads, inter_threads=inter_threads, strict_device=strict_device
        )
        self.stats = EngineStats()

    @property
    def model_name(self) -> str:
        """Name recorded at export."""
        return self.manifest.model_name

    @property
    def languages(self) -> list[str]:
        """Languages the model reads or writes."""
        return sorted({lang for pair in self.manifest.pairs for lang in pair})

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Supported (source, target) directions."""
        return list(self.manifest.pairs)

    @property
    def provider(self) -> str:
        """The onnxruntime execution provider in use."""
        return self.model.provider

    @property
    def max_source_tokens(self) -> int:
        """Longest source (in pieces, specials included) the model's positions allow."""
        return self.manifest.max_positions

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        """Raise UnsupportedLanguageError unless the model translates source_lang -> target_lang."""
        if (source_lang, target_lang) not in self.manifest.pairs:
            supported = ", ".join(f"{a}->{b}" for a, b in self.manifest.pairs)
            raise UnsupportedLanguageError(
                f"language pair {source_lang}->{target_lang} is not supported (supported: {supported})"
            )

    def split_sentences(self, text: str) -> list[tuple[str, str]]:
        """(sentence, following whitespace) pairs; see engine.text."""
        return split_sentences(text)

    def count_tokens(self, text: str) -> int:
        """Source length in pieces as the model sees it (tag and eos included)."""
        return len(self.tokenizer.encode(text)) + 2

    def translate(
        self,
        texts: Sequence[str],
        *,
        source_lang: str,
        target_lang: str,
        options: DecodeOptions | None = None,
        **option_kwargs: object,
    ) -> list[TranslationResult]:
        """Translate sentences of ``source_lang`` into ``target_lang``; blank input gives "" without decoding."""
        self.check_pair(source_lang, target_lang)
        options = options or DecodeOptions(**option_kwargs)  # type: ignore[arg-type]
        results: list[TranslationResult | None] = [None] * len(texts)
        todo = [i for i, t in enumerate(texts) if t.strip()]
        for i, t in enumerate(texts):
            if not t.strip():
                results[i] = TranslationResult(
                    [""] * options.num_hypotheses,
                    [[]] * options.num_hypotheses,
                    [0.0] * options.num_hypotheses if options.return_scores else [],
                )
        encoded = [self.tokenizer.encode_source(texts[i], target_lang) for i in todo]
        for i, result in zip(todo, self.translate_batch(encoded, options=options), strict=True):
            results[i] = result
        return [r for r in results if r is not None]

    def translate_batch(
        self, source: Sequence[Sequence[int]], *, options: DecodeOptions | None = None, **option_kwargs: object
    ) -> list[TranslationResult]:
        """Translate source id sequences (tag + pieces + eos); sorted by length and chunked to cut padding."""
        options = options or DecodeOptions(**option_kwargs)  # type: ignore[arg-type]
        for seq in source:
            if len(seq) == 0:
                raise ValueError("a source sequence is empty: it needs at least the eos id")
            if len(seq) > self.max_source_tokens:
                raise InputTooLongError(
                    f"a sentence has {len(seq)} tokens; the model accepts at most {self.max_source_tokens}"
                )
        order = sorted(range(len(source)), key=lambda i: len(source[i]))
        results: list[TranslationResult | None] = [None] * len(source)
        for start in range(0, len(order), options.max_batch_size):
            chunk = order[start : start + options.max_batch_size]
            for i, hyps in zip(chunk, self._decode_chunk([source[i] for i in chunk], options), strict=True):
                results[i] = TranslationResult(
                    hypotheses=[self.tokenizer.decode(h.tokens) for h in hyps],
                    tokens=[list(h.tokens) for h in hyps],
                    scores=[float(h.score) for h in hyps] if options.return_scores else [],
                )
        return [r for r in results if r is not None]

    def _max_lengths(self, source: Sequence[Sequence[int]], options: DecodeOptions) -> list[int]:
        cap = self.manifest.max_positions - 1
        if options.max_decoding_length is not None:
            return [min(options.max_decoding_length, cap)] * len(source)
        return [min(len(s) + options.extra_decoding_length, cap) for s in source]

    def _decode_chunk(self, source: Sequence[Sequence[int]], options: DecodeOptions) -> list[list[Hypothesis]]:
        """Encode once, then step the decoder until the search is done; finished rows leave the batch."""
        m = self.manifest
        S = max(len(s) for s in source)
        ids = np.full((len(source), S), m.pad_id, dtype=np.int64)
        mask = np.zeros((len(source), S), dtype=np.int64)
        for i, seq in enumerate(source):
            ids[i, : len(seq)], mask[i, : len(seq)] = seq, 1
        state = self.model.encode(ids, mask)
        max_lengths = self._max_lengths(source, options)
        search: SearchStrategy
        if options.beam_size == 1:
            search = GreedySearch(
                len(source),
                eos_id=m.eos_id,
                max_lengths=max_lengths,
                min_length=options.min_decoding_length,
                length_penalty=options.length_penalty,
            )
        else:
            search = BeamSearch(
                len(source),
                beam_size=options.beam_size,
                eos_id=m.eos_id,
                max_lengths=max_lengths,
                num_hypotheses=options.num_hypotheses,
                length_penalty=options.length_penalty,
                min_length=options.min_decoding_length,
            )
        tokens = np.full(len(source), m.decoder_start_id, dtype=np.int64)
        steps = 0
        while not search.is_done():
            out = search.advance(self.model.step(tokens, state))  # (R, V) log-probs -> next tokens and parents
            steps += 1
            if search.is_done():
                break
            self.model.reorder(
                state,
                _unless_identity(out.parent_rows, len(tokens)),
                _unless_identity(out.parent_sentences, len(state.encoder_mask)),
            )
            tokens = out.tokens
        hypotheses = search.finalize()
        with self.stats.lock:
            self.stats.batches += 1
            self.stats.sentences += len(source)
            self.stats.source_tokens += int(mask.sum())
            self.stats.padded_source_tokens += int(mask.size)
            self.stats.decoder_steps += steps
            self.stats.generated_tokens += sum(len(h[0].tokens) + 1 for h in hypotheses if h)
        return hypotheses
