"""DecodeOptions: the search knobs of one translate call, validated where they are built."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeOptions:
    """Search options; defaults follow the paper (beam 4, length penalty alpha 0.6, max length = source + 50)."""

    beam_size: int = 4  # 1 = greedy search
    length_penalty: float = 0.6  # GNMT alpha: score / ((5 + length) / 6) ** alpha; 0 disables
    max_decoding_length: int | None = None  # None = source length + extra_decoding_length
    extra_decoding_length: int = 50
    min_decoding_length: int = 1  # tokens before eos is allowed (keeps non-empty input from translating to "")
    num_hypotheses: int = 1  # n-best list size, <= beam_size
    max_batch_size: int = 32  # sentences per engine batch after sorting by length
    return_scores: bool = False

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1 (1 = greedy), got {self.beam_size}")
        if not 1 <= self.num_hypotheses <= self.beam_size:
            raise ValueError(
                f"num_hypotheses must be between 1 and beam_size ({self.beam_size}), got {self.num_hypotheses}"
            )
        if self.length_penalty < 0:
            raise ValueError(f"length_penalty must be >= 0, got {self.length_penalty}")
        if self.max_decoding_length is not None and self.max_decoding_length < 1:
            raise ValueError(f"max_decoding_length must be >= 1 or None, got {self.max_decoding_length}")
        if self.extra_decoding_length < 0 or self.min_decoding_length < 0:
            raise ValueError("extra_decoding_length and min_decoding_length must be >= 0")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
