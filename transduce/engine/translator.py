"""Translator: text or token ids in, translations out, through the exported ONNX graphs (no torch)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from transduce.engine import session as session_module
from transduce.engine.decoding import decode_on
from transduce.engine.denormals import flushing_denormals
from transduce.engine.errors import InputTooLongError, ModelLoadError, UnsupportedLanguageError
from transduce.engine.inputs import ids_given, texts_given
from transduce.engine.manifest import load_manifest, spelt_as_known
from transduce.engine.numpy_runner import NumpyRunner
from transduce.engine.options import DEFAULT_OPTIONS, DecodeOptions
from transduce.engine.results import EngineStats, TranslationResult, filled, passed_through
from transduce.engine.runner import CUDA, DecoderRunner, OrtSessions
from transduce.engine.search import Hypothesis
from transduce.engine.session import auto_intra_threads, auto_replicas, model_providers, open_runner, release_memory
from transduce.engine.shortlist import ShortlistConfig, row_peak
from transduce.engine.text import has_letters
from transduce.tokenizer import Tokenizer

log = logging.getLogger("transduce.engine")


OnResult = Callable[[int, TranslationResult], None]  # (input index, its result) as soon as that input is done
Dropped = Callable[[], Collection[int]]  # polled between decoder steps: the inputs nobody waits for any more


def count_source_tokens(tokenizer: Tokenizer, text: str) -> int:
    """Source length in pieces as the model sees it (tag and eos included); needs only the tokenizer."""
    return len(tokenizer.encode(text)) + 2


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
        shortlist: bool = True,
        shortlist_config: ShortlistConfig | None = None,
        replicas: int = 1,
        shared_pool: bool = False,
    ) -> None:
        """``replicas``: sessions opened side by side; that many ``translate`` calls from different threads decode
        at once (CTranslate2's inter_threads; the service's ``engine_replicas``). Each has ``intra_threads`` threads,
        or (0) the cores shared out between them, e.g. two of one thread each on two cores (on CUDA, 1 each, one
        replica included: ``auto_intra_threads``). ``replicas=0`` picks (``auto_replicas``): 2 where 2 or more cores
        are usable, else 1.

        ``shared_pool``: with one replica on the CPU, run on the process's one onnxruntime thread pool, made of this
        engine's thread count unless an engine made it before (``transduce.engine.session.SharedPool``: 1.04-1.10x
        on 2 threads). Replicas decode at the same time, each on threads of its own, so an engine of several makes
        no pool, and neither does an engine on CUDA. Once the pool is made, every engine of the process runs on it,
        whatever it asks for. ``shared_pool`` also has the engine's CPU sessions allocate from the process's one
        CPU arena (``transduce.engine.arena``), replicas included."""
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"replicas must be a positive integer or 0 (auto), got {replicas!r}")
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

        n = replicas or auto_replicas()  # after the model is known to load: a missing model is the first thing said

        def planned(cuda: bool) -> tuple[int, bool]:
            """Threads per replica, and whether the engine makes the process's shared pool: a CPU engine of one
            replica only (a GPU engine's host threads mostly wait; a pool it made of 1 thread would then be every
            later CPU model's, and one of every core spins for nothing)."""
            return intra_threads or auto_intra_threads(cuda, n), shared_pool and n == 1 and not cuda

        def opened(plan: tuple[int, bool], loaded: OrtSessions | None) -> DecoderRunner:
            """A runner on sessions of its own; ``loaded``: the first's, whose shortlist and table it shares."""
            threads, pooled = plan
            return open_runner(
                m,
                device=device,
                intra_threads=threads,
                inter_threads=inter_threads,
                strict_device=strict_device,
                shortlist=shortlist,
                shortlist_config=shortlist_config,
                loaded=loaded,
                shared_pool=pooled,
                shared_arena=shared_pool,
            )

        # the plan for where the model is meant to run, then for where its first replica really runs: CUDA offered
        # but not usable (a GPU image on a host without a GPU) falls back to the CPU, which gets the CPU's plan. An
        # int8 export's MatMuls run on the CPU even in a CUDA session: it gets the CPU's plan from the start.
        on_cuda = CUDA in model_providers(m, device) and m.dtype != "int8-dynamic"
        if m.dtype == "int8-dynamic" and m.raw.get("int8_weight_bits") != 7 and row_peak() < 127:
            log.warning(
                "%s has 8-bit int8 weights, whose MatMuls can saturate on this CPU (x86 without VNNI): export it "
                "again here (`transduce export --dtype int8`) or with TRANSDUCE_INT8_WEIGHT_BITS=7, as the Docker "
                "image's build does",
                m.model_name,
            )
        plan, cpu_plan = planned(on_cuda), planned(False)
        pool_made = session_module.PROCESS_POOL.size is not None  # then every session runs on it, whatever its plan
        if on_cuda and pool_made:
            log.warning(
                "%s runs on CUDA on the process's shared thread pool, which a CPU engine made first: its host threads "
                "spin while the GPU works (a CUDA engine alone gets 1 thread)",
                m.model_name,
            )
        first = opened(plan, None)
        if on_cuda and first.sessions.provider != CUDA and plan != cpu_plan and not pool_made:
            plan = cpu_plan
            first = opened(plan, None)
        self.runners: list[DecoderRunner] = [first]
        # replicas of one thread on the CPU run the first's sessions, each from its own thread (onnxruntime runs a
        # session's calls at once, and a pool of one thread is the calling thread): one copy of the weights and one
        # arena instead of one each. Wider replicas would share one pool, so they get their own sessions, unless the
        # process's pool is made: every session runs on it then.
        shares = isinstance(first, NumpyRunner) and (plan[0] == 1 or pool_made)
        while len(self.runners) < n:
            if shares:
                self.runners.append(NumpyRunner(first.sessions))
                continue
            runner = opened(plan, first.sessions)
            if runner.sessions.provider != first.sessions.provider:  # onnxruntime fell back, e.g. out of GPU memory
                log.warning(
                    "engine replica %d of %d opened on %s, not %s like the first: serving with %d replica(s)",
                    len(self.runners) + 1,
                    n,
                    runner.sessions.provider,
                    first.sessions.provider,
                    len(self.runners),
                )
                break
            self.runners.append(runner)
        self.runner = self.runners[0]  # the first replica (the provider, and what tests patch)
        self._free: queue.SimpleQueue[DecoderRunner] = queue.SimpleQueue()  # runners no translate call holds
        for runner in self.runners:
            self._free.put(runner)
        self.stats = EngineStats()
        self._holding = threading.local()  # .count: replicas the current thread holds (a re-entrant call's check)
        self._waiting_lock = threading.Lock()
        self._held_waiting = 0  # replicas held by threads waiting for another in a nested call
        self._closed = False

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
        if self._closed:
            raise RuntimeError("this Translator is closed: open another")
        return self.runner.sessions.provider

    @property
    def max_source_tokens(self) -> int:
        """Longest source (in pieces, specials included) the model's positions allow."""
        return self.manifest.max_positions

    def spelt(self, source_lang: str, target_lang: str) -> tuple[str, str]:
        """The codes as the model spells them where they differ by case alone ("EN" -> "en"), as the service reads
        them."""
        source, target = spelt_as_known(self.languages, (source_lang, target_lang))
        return source, target

    def check_pair(self, source_lang: str, target_lang: str) -> None:
        """Raise UnsupportedLanguageError unless the model translates source_lang -> target_lang."""
        if (source_lang, target_lang) not in self.manifest.pairs:
            supported = ", ".join(f"{a}->{b}" for a, b in self.manifest.pairs)
            raise UnsupportedLanguageError(
                f"language pair {source_lang}->{target_lang} is not supported (supported: {supported})"
            )

    def count_tokens(self, text: str) -> int:
        """Source length in pieces as the model sees it (tag and eos included)."""
        return count_source_tokens(self.tokenizer, text)

    def unknown_runs(self, text: str) -> list[str]:
        """Runs of ``text`` the model's vocabulary cannot spell (``Tokenizer.unknown_runs``): the service keeps them
        as written, as glossary terms to keep, instead of letting the model turn them into " ⁇ "."""
        return self.tokenizer.unknown_runs(text)

    def translate(
        self,
        texts: Sequence[str],
        *,
        source_lang: str,
        target_lang: str,
        options: DecodeOptions = DEFAULT_OPTIONS,
        on_result: OnResult | None = None,
        dropped: Dropped | None = None,
    ) -> list[TranslationResult]:
        """Translate sentences of ``source_lang`` into ``target_lang``; blank input gives "" and input without a letter
        (``has_letters``: "123", "---", control characters) itself without its surrounding whitespace, both without
        decoding.

        ``on_result(i, result)`` is called (on this thread) as soon as input ``i`` is translated, while the rest of
        its batch may still decode (inputs translated without decoding first); the returned list holds every result
        all the same. ``dropped()``, asked between decoder steps, names inputs nobody waits for any more (a client
        gone): they leave the batch at once, with an empty result (no hypotheses) and no ``on_result``; the others'
        outputs are unchanged. A call of this Translator from either waits for a free replica, or raises a
        RuntimeError where every replica is held by such calls (it would wait for ever)."""
        texts = texts_given(texts)
        if self._closed:  # (inputs translated without decoding would have passed)
            raise RuntimeError("this Translator is closed: open another")
        source_lang, target_lang = self.spelt(source_lang, target_lang)
        self.check_pair(source_lang, target_lang)
        todo = [i for i, t in enumerate(texts) if has_letters(t)]
        results: list[TranslationResult | None] = [None] * len(texts)
        for i in sorted(set(range(len(texts))) - set(todo)):  # each its own lists: a caller may change one
            results[i] = result = passed_through(texts[i], options)
            if on_result is not None:
                on_result(i, result)
        encoded = [self.tokenizer.encode_source(texts[i], target_lang) for i in todo]
        early = None if on_result is None else (lambda j, result: on_result(todo[j], result))
        gone = None if dropped is None else _positions(dropped, todo)
        for i, result in zip(todo, self._decode_ids(encoded, options, early, gone), strict=True):
            results[i] = result
        return filled(results)

    def translate_batch(
        self,
        source: Sequence[Sequence[int]],
        *,
        options: DecodeOptions = DEFAULT_OPTIONS,
        on_result: OnResult | None = None,
        dropped: Dropped | None = None,
    ) -> list[TranslationResult]:
        """Translate source id sequences (tag + pieces + eos); sorted by length and chunked to cut padding.
        ``on_result``, ``dropped``: as in ``translate``, with indices into ``source``."""
        return self._decode_ids(ids_given(source, self.manifest.vocab_size), options, on_result, dropped)

    def _decode_ids(
        self,
        source: Sequence[Sequence[int]],
        options: DecodeOptions,
        on_result: OnResult | None,
        dropped: Dropped | None,
    ) -> list[TranslationResult]:
        """``translate_batch`` on ids already checked (``translate``'s come from the tokenizer)."""
        for i, seq in enumerate(source):
            if len(seq) == 0:
                raise ValueError(f"source sequence {i} is empty: it needs at least the eos id")
            if len(seq) > self.max_source_tokens:
                raise InputTooLongError(
                    f"a sentence has {len(seq)} tokens (input {i}); the model accepts at most {self.max_source_tokens}"
                )
        order = sorted(range(len(source)), key=lambda i: len(source[i]))
        results: list[TranslationResult | None] = [None] * len(source)

        def done(i: int, hyps: list[Hypothesis]) -> None:
            if results[i] is None:
                result = TranslationResult(
                    hypotheses=[self.tokenizer.decode(h.tokens) for h in hyps],
                    tokens=[list(h.tokens) for h in hyps],
                    scores=[float(h.score) for h in hyps] if options.return_scores else [],
                )
                results[i] = result
                if on_result is not None and hyps:  # no hypotheses: dropped
                    on_result(i, result)

        for start in range(0, len(order), options.chunk_size):
            chunk = order[start : start + options.chunk_size]
            if dropped is not None:  # those already dropped are not encoded at all
                before = set(dropped())
                for i in chunk:
                    if i in before:
                        results[i] = TranslationResult([], [], [])
                chunk = [i for i in chunk if i not in before]
                if not chunk:
                    continue
            early = None if on_result is None else (lambda j, hyps, chunk=chunk: done(chunk[j], hyps))
            gone = None if dropped is None else _positions(dropped, chunk)
            decoded = self._decode_chunk([source[i] for i in chunk], options, early, gone)
            for i, hyps in zip(chunk, decoded, strict=True):
                done(i, hyps)
        return filled(results)

    def _decode_chunk(
        self,
        source: Sequence[Sequence[int]],
        options: DecodeOptions,
        on_finished: Callable[[int, list[Hypothesis]], None] | None = None,
        dropped: Dropped | None = None,
    ) -> list[list[Hypothesis]]:
        """Encode once, then step the decoder until the search is done, on a free replica."""
        if self._closed:
            raise RuntimeError("this Translator is closed: open another")
        held = getattr(self._holding, "count", 0)  # replicas this thread holds: a call from on_result or dropped
        registered = False
        try:
            if held:  # it waits for a replica while holding some: if every replica is held by such waiters, for ever
                with self._waiting_lock:
                    if self._free.empty() and self._held_waiting + held >= len(self.runners):
                        raise RuntimeError(
                            "translate was called from inside on_result or dropped while every replica of the "
                            "Translator was held by such calls: call it after translate returns"
                        )
                    self._held_waiting += held
                    registered = True
            runner = self._free.get()
        finally:  # (Ctrl-C while waiting: the count comes down all the same)
            if registered:
                with self._waiting_lock:
                    self._held_waiting -= held
        self._holding.count = held + 1
        try:
            with flushing_denormals():  # masked scores' exp() underflows: microcode assists on x86 (engine.denormals)
                return decode_on(runner, self.manifest, source, options, self.stats, on_finished, dropped)
        finally:
            self._holding.count = held
            self._free.put(runner)

    def close(self) -> None:
        """Let go of the sessions and hand back to the system what they freed (``session.release_memory``; what an
        engine leaves to glibc otherwise stays with the process). Calls after it raise; closing twice is fine. Not
        while a call is under way, nor while a StepScheduler runs on this Translator."""
        if self._closed:
            return
        self._closed = True
        self.runners.clear()
        while not self._free.empty():
            self._free.get_nowait()
        del self.runner
        release_memory()

    def __enter__(self) -> Translator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _positions(dropped: Dropped, among: list[int]) -> Dropped:
    """``dropped`` (indices) as positions in ``among`` (a list of some of those indices; the others are not named)."""
    position = {i: j for j, i in enumerate(among)}
    return lambda: [position[i] for i in dropped() if i in position]
