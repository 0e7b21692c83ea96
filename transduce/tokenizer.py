"""SentencePiece tokenizer wrapper with target-language tags; torch-free so the engine can import it."""

from __future__ import annotations

import io
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from transduce.textmarks import EDGE_MARKS, LINE_BREAKS


class Tokenizer:
    """Joint SentencePiece vocabulary; special ids come from the SentencePiece model, never from constants."""

    def __init__(self, model: str | Path | bytes, *, target_tag: str = "", languages: Sequence[str] = ()) -> None:
        self.sp = spm.SentencePieceProcessor()
        try:
            if isinstance(model, bytes):
                self.sp.LoadFromSerializedProto(model)
            else:
                self.sp.Load(str(model))
        except (OSError, RuntimeError) as exc:
            raise ValueError(
                f"cannot load SentencePiece model {model if not isinstance(model, bytes) else '<bytes>'}: {exc}"
            ) from exc
        self.target_tag = target_tag
        self.languages = tuple(languages)
        self._tag_ids: dict[str, int] = {}
        for lang in self.languages:
            if target_tag:
                tag = target_tag.format(lang=lang)
                tag_id = self.sp.PieceToId(tag)
                if tag_id == self.sp.unk_id():
                    raise ValueError(f"target-language tag {tag!r} is not in the SentencePiece vocabulary")
                self._tag_ids[lang] = tag_id

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special ones included."""
        return int(self.sp.GetPieceSize())

    @property
    def pad_id(self) -> int:
        """Padding id."""
        return int(self.sp.pad_id())

    @property
    def unk_id(self) -> int:
        """Unknown-piece id."""
        return int(self.sp.unk_id())

    @property
    def bos_id(self) -> int:
        """Beginning-of-sentence id."""
        return int(self.sp.bos_id())

    @property
    def eos_id(self) -> int:
        """End-of-sentence id."""
        return int(self.sp.eos_id())

    def tag_id(self, lang: str) -> int | None:
        """Id of the tag that asks for translation into ``lang`` (None when the model has no tags)."""
        if not self.target_tag:
            return None
        if lang not in self._tag_ids:
            raise ValueError(f"no target-language tag for {lang!r}; the model knows {list(self.languages)}")
        return self._tag_ids[lang]

    def encode(self, text: str) -> list[int]:
        """Text -> piece ids (no specials)."""
        return list(self.sp.EncodeAsIds(text))

    def encode_source(self, text: str, target_lang: str | None = None) -> list[int]:
        """Source ids as the model was trained on them: [<2xx>] pieces </s>."""
        tag = self.tag_id(target_lang) if target_lang is not None else None
        return ([tag] if tag is not None else []) + self.encode(text) + [self.eos_id]

    def unknown_runs(self, text: str) -> list[str]:
        """The runs of ``text`` the vocabulary cannot spell (each is read as one unknown piece, and a model can only
        write it back as the unknown piece, " ⁇ "): emoji, other scripts; each once, in order. An unknown run with
        letters is widened to the whole word it is part of ("Иван", whose "а" alone is spelled; "Ærøskøbing";
        "Dvořák"), so the word is kept whole instead of losing its unknown letters; symbols (emoji) are not widened,
        so "Hi👋" keeps "👋" and translates "Hi"."""
        unk = self.unk_id
        unknown = [p for p in self.sp.encode(text, out_type="proto").pieces if p.id == unk and p.surface.strip()]
        if not unknown:
            return []
        data = text.encode("utf-8")
        char_at = [0] * (len(data) + 1)  # byte offset -> character offset (SentencePiece counts bytes)
        at = 0
        for i, c in enumerate(text):
            for _ in range(len(c.encode("utf-8"))):
                char_at[at] = i
                at += 1
        char_at[at] = len(text)
        runs, covered = [], 0  # covered: where the last widened word ended (each word is widened once)
        for piece in unknown:
            start, end = char_at[piece.begin], char_at[piece.end]
            if start < covered:
                continue
            if any(
                _in_word(c) and not c.isdigit() for c in text[start:end]
            ):  # a letter or a combining mark ("a\u0330b"):
                # part of a word, kept whole (a mark cut off its letter sat on a space)
                while start > covered and _in_word(text[start - 1]):
                    start -= 1
                while end < len(text) and _in_word(text[end]):
                    end += 1
                covered = end
            runs.append(_trimmed(text, start, end))
        return list(dict.fromkeys(run for run in runs if run))

    def decode(self, ids: Iterable[int]) -> str:
        """Piece ids -> text; control ids (pad/bos/eos/tags) are dropped."""
        return str(self.sp.DecodeIds([int(i) for i in ids if not self.sp.IsControl(int(i))]))


_LINE_EDGE = re.compile(rf"(?:[^\S{LINE_BREAKS}]|[{EDGE_MARKS}])*")  # blanks and marks, short of a line break


def _trimmed(text: str, start: int, end: int) -> str:
    """``text[start:end]`` without its whitespace, and without the ``EDGE_MARKS`` at an end that is also its line's
    (the segmenter keeps those with the whitespace around a sentence: kept in a run too, they came back twice; inside
    a line a mark stays in the run, or the model would lose it)."""
    run = text[start:end].strip()
    line_end = end + len(_LINE_EDGE.match(text, end).group())  # type: ignore[union-attr]
    if line_end == len(text) or text[line_end] in LINE_BREAKS:
        run = run.rstrip(EDGE_MARKS).rstrip()
    before = text[:start]
    head = len(before) - len(before.rstrip(f" \t{EDGE_MARKS}"))
    if start - head == 0 or text[start - head - 1] in LINE_BREAKS:
        run = run.lstrip(EDGE_MARKS).lstrip()
    return run


def _in_word(c: str) -> bool:
    """A letter, digit, underscore or combining mark: what a word is made of (as the glossary's whole-word match
    reads ``\\w``, so a widened run is found again: "my_Иван_file")."""
    return c.isalnum() or c == "_" or unicodedata.category(c).startswith("M")


def train_tokenizer(
    sentences: Iterable[str],
    *,
    vocab_size: int,
    languages: Sequence[str] = (),
    target_tag: str = "<2{lang}>",
    character_coverage: float = 1.0,
    input_sentence_size: int = 2_000_000,
    seed_sentencepiece_size: int = 1_000_000,
) -> bytes:
    """Train a joint unigram SentencePiece model (pad=0 unk=1 bos=2 eos=3, tags as control symbols); returns bytes."""
    tags = [target_tag.format(lang=lang) for lang in languages] if target_tag else []
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=character_coverage,
            pad_id=0,
            unk_id=1,
            bos_id=2,
            eos_id=3,
            control_symbols=tags,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            seed_sentencepiece_size=seed_sentencepiece_size,
            hard_vocab_limit=False,
            minloglevel=2,
            num_threads=2,
        )
    except RuntimeError as exc:  # SentencePiece's own words: "INTERNAL: src/trainer_interface.cc(638) [...]"
        small = re.search(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)", str(exc))
        if small is None:
            raise
        raise ValueError(
            f"vocab_size {vocab_size} is too small: the text's characters and the special pieces alone take "
            f"{small.group(1)}; give at least that (the shipped model has 8000)"
        ) from None
    return model.getvalue()
