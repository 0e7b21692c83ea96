"""DecodeOptions (the search knobs of one translate call) and SchedulerConfig (the step scheduler's admission
limits), validated where they are built."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

MAX_BEAM_SIZE = 64  # a beam keeps beam x vocabulary scores per sentence at every step: beyond, memory runs out


@dataclass(frozen=True)
class DecodeOptions:
    """Search options; defaults follow the paper (beam 4, length penalty alpha 0.6); the output length is capped
    relative to the source (Bergamot's max-length-factor), so a single word or a run of symbols cannot decode on to
    the model's maximum."""

    beam_size: int = 4  # 1 = greedy search
    length_penalty: float = 0.6  # GNMT alpha: score / ((5 + length) / 6) ** alpha; 0 disables
    max_decoding_length: int | None = None  # None = max_length_ratio * source length + extra_decoding_length
    max_length_ratio: float = 2.0
    extra_decoding_length: int = 10
    min_decoding_length: int = 1  # tokens before eos is allowed (keeps non-empty input from translating to "")
    num_hypotheses: int = 1  # n-best list size, <= beam_size
    chunk_size: int = 32  # sentences per encoder/decoder pass: inputs are sorted by length, then cut into chunks
    return_scores: bool = False
    # a token that would repeat an n-gram of this many pieces already in its hypothesis is not chosen (CTranslate2's
    # and transformers' no_repeat_ngram_size); 0 = off, the engine's default; the service and the command line use 5
    no_repeat_ngram_size: int = 0

    def __post_init__(self) -> None:
        # types first, as SchedulerConfig checks them: 2.5 built and failed mid-decode, True passed as 1, "no" as
        # return_scores True; a numpy integer is taken as the int it is
        for name in _WHOLE_NUMBERS:
            value = getattr(self, name)
            if not (value is None and name == "max_decoding_length"):
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise ValueError(f"{name} must be a whole number, got {value!r}")
                object.__setattr__(self, name, int(value))
        for name in ("length_penalty", "max_length_ratio"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), numbers.Real):
                raise ValueError(f"{name} must be a number, got {getattr(self, name)!r}")
        if not isinstance(self.return_scores, bool):
            raise ValueError(f"return_scores must be True or False, got {self.return_scores!r}")
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise ValueError(
                f"beam_size must be between 1 (greedy) and {MAX_BEAM_SIZE} (a search keeps beam x vocabulary scores "
                f"per sentence at every step: beyond, memory runs out), got {self.beam_size}"
            )
        if not 1 <= self.num_hypotheses <= self.beam_size:
            raise ValueError(
                f"num_hypotheses must be between 1 and beam_size ({self.beam_size}), got {self.num_hypotheses}"
            )
        if not 0 <= self.length_penalty < math.inf:  # (NaN passed "< 0" and failed later, in the search)
            raise ValueError(f"length_penalty must be a number >= 0, got {self.length_penalty}")
        if self.max_decoding_length is not None and self.max_decoding_length < 1:
            raise ValueError(f"max_decoding_length must be >= 1 or None, got {self.max_decoding_length}")
        if not 0 < self.max_length_ratio < math.inf:
            raise ValueError(f"max_length_ratio must be a number > 0, got {self.max_length_ratio}")
        if self.extra_decoding_length < 0 or self.min_decoding_length < 0:
            raise ValueError("extra_decoding_length and min_decoding_length must be >= 0")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if (problem := no_repeat_problem(self.no_repeat_ngram_size)) is not None:
            raise ValueError(f"no_repeat_ngram_size {problem}")

    def max_lengths(self, source_lengths: Sequence[int], cap: int) -> list[int]:
        """The output length limit of each source (in pieces, tag and eos included), at most ``cap`` and at least 1
        (a ratio under 1 with no extra length gave a 3-piece source 0, which the search refuses)."""
        if self.max_decoding_length is not None:
            return [max(1, min(self.max_decoding_length, cap))] * len(source_lengths)
        ratio, extra = self.max_length_ratio, self.extra_decoding_length
        return [max(1, min(int(min(ratio * n, cap)) + extra, cap)) for n in source_lengths]  # (1e308 * n: inf)


def no_repeat_problem(size: int) -> str | None:
    """What is wrong with a no_repeat_ngram_size, or None: 0 (off) and 2 or more are valid."""
    if size < 0 or size == 1:
        return f"must be 0 (off) or at least 2 (1 would forbid any piece twice), got {size}"
    return None


_WHOLE_NUMBERS = (
    "beam_size",
    "max_decoding_length",
    "extra_decoding_length",
    "min_decoding_length",
    "num_hypotheses",
    "chunk_size",
    "no_repeat_ngram_size",
)
DEFAULT_OPTIONS = DecodeOptions()
# no_repeat_ngram_size of the service and the command line. On the shipped model at beam 4 it raised chrF on every dev
# set and direction (Multi30k val +0.2 / +0.1, newstest2013 +0.6 / +1.2) with BLEU within +-0.1 of off and never
# below it; 3 and 4 cut more loops but cost up to 0.3 BLEU on Multi30k en->de (README, "What each lever did")
SERVED_NO_REPEAT_NGRAM_SIZE = 5

# Queue defaults shared by both schedulers (the step scheduler here, the static batcher in batcher.py)
MAX_BATCH_SIZE = 32  # sentences decoding at once
MAX_QUEUE_ITEMS = 1024  # sentences allowed to wait; a submit beyond it is refused at once
# the step scheduler's token budget per worker when left to auto (0). On a CPU a step's time grows with every row, so
# a batch filled by heavy requests slows every sentence in it: behind three ~4,800-character requests at beam 8 (the
# 2-core bench machine, bench load's heavy workload) 2048 gave short requests a p99 of 0.47-0.62 s against 1.6-2.0 s
# with 8192, at the same requests/s under the uniform and mixed workloads (16 and 64 clients); a GPU wants big batches
TOKENS_IN_FLIGHT_CPU, TOKENS_IN_FLIGHT_CUDA = 2048, 8192


def sentence_cost(source_tokens: int, options: DecodeOptions) -> int:
    """What a sentence adds to a batch's work per decoder step: its source tokens x beam width (both schedulers'
    measure of a batch, ``max_tokens_in_flight`` and ``max_batch_tokens``)."""
    return source_tokens * options.beam_size


@dataclass(frozen=True)
class SchedulerConfig:
    """Admission limits of the running batch and the queue."""

    max_batch_size: int = MAX_BATCH_SIZE  # sentences decoding at once, every beam width together
    # summed source tokens x beam of those sentences, per worker (a costlier one runs alone); 0 = auto: see for_device
    max_tokens_in_flight: int = 0
    max_queue_items: int = MAX_QUEUE_ITEMS  # sentences waiting to join; a submit beyond it is refused at once
    request_share: float = 0.75  # of both limits, what one request may hold, so a newcomer finds room at once
    # Newcomers join in groups: each join costs a copy of the running batch's state and adds a search object, so
    # while the batch is busy a join waits until join_min_free places are free (0 = half of max_batch_size) or
    # join_every_steps steps passed since the last join. An empty or lightly used batch takes newcomers at once.
    join_min_free: int = 0
    join_every_steps: int = 8
    # A queued sentence within its request's share that has not fitted the room left for this many steps (of each
    # worker: the count is every worker's steps) stops every other admission in the worker that finds it so, until it
    # fits there, so a long legal sentence is never starved by a stream of short ones.
    starve_steps: int = 16

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_tokens_in_flight", "max_queue_items", "join_every_steps", "starve_steps"):
            value, least = getattr(self, name), 0 if name == "max_tokens_in_flight" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                kind = "0 (auto) or a positive integer" if least == 0 else "a positive integer"
                raise ValueError(f"{name} must be {kind}, got {value!r}")
        if not 0 < self.request_share <= 1:
            raise ValueError(f"request_share must be in (0, 1], got {self.request_share!r}")
        if isinstance(self.join_min_free, bool) or not 0 <= self.join_min_free <= self.max_batch_size:
            raise ValueError(
                f"join_min_free must be between 0 (half of max_batch_size) and max_batch_size "
                f"({self.max_batch_size}), got {self.join_min_free!r}"
            )

    def for_device(self, cuda: bool) -> SchedulerConfig:
        """This config with an auto (0) token budget made the device's: TOKENS_IN_FLIGHT_CUDA on CUDA, else
        TOKENS_IN_FLIGHT_CPU; a budget that was set is kept."""
        if self.max_tokens_in_flight:
            return self
        budget = TOKENS_IN_FLIGHT_CUDA if cuda else TOKENS_IN_FLIGHT_CPU
        return dataclasses.replace(self, max_tokens_in_flight=budget)

    @property
    def join_free(self) -> int:
        """Free places that let newcomers join a busy batch at once."""
        return self.join_min_free or max(1, self.max_batch_size // 2)
