"""One validation step: a parsed POST /translate body becomes a ``TranslationJob`` that the pipeline queues as is.

Every request limit of the settings is checked here and nowhere else in the service (the queue's own capacity,
``max_queue_items``, is checked by the batcher when the job is submitted). Failures raise ``ApiError`` or the
engine's ``UnsupportedLanguageError``; ``transduce.service.errors`` maps them to HTTP responses.

``source: "auto"`` is resolved here too, per item: each text's language is detected among the model's languages
that translate into the target, and the target itself (a text already in the target language is passed through
unchanged, as a text is whose named source is its target). Whether a request is accepted never depends on what is
detected: every limit applies to every item.

``format: "html"`` items are parsed here too (``transduce.service.htmldoc``): the limits count the HTML as sent
(``max_chars``) and the sentences as the model will see them, placeholders included (``max_sentence_tokens``);
detection reads their text without the markup.

Glossary terms (the request's ``glossary`` over the server's ``glossary_file`` for the item's language pair) are
masked here (``transduce.service.glossary``), after detection (which reads the text as sent) and before the sentences
are cut and counted: a term is one placeholder, so it never splits a sentence and counts as one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from transduce.engine.errors import InputTooLongError
from transduce.engine.manifest import spelt_as_known
from transduce.service.config import Settings
from transduce.service.detect import Detection, LanguageDetector
from transduce.service.engine_api import TranslatorLike
from transduce.service.errors import ApiError
from transduce.service.glossary import Terms, duplicate, glossaries, mask_text, server_terms, splitter, twice_text
from transduce.service.htmldoc import HtmlItem, parse_html
from transduce.service.htmlnodes import Term
from transduce.service.placeholders import PLACEHOLDER
from transduce.service.schemas import GlossaryEntry, TranslateRequest


class Item(Protocol):
    """One q entry cut into the sentences sent to the model, and put back together from their translations: a
    ``Segmented`` (format=text) or an ``HtmlItem`` (format=html, whose sentences hold its inline markup as
    placeholders)."""

    @property
    def sentences(self) -> tuple[str, ...]: ...

    def rejoin(self, translations: Sequence[str]) -> str: ...


@dataclass(frozen=True)
class TranslationJob:
    """A request after validation: its texts cut into sentences (each with its token count) and its search options."""

    sources: tuple[str, ...]  # the source language of each item (detected under source=auto)
    target: str
    items: tuple[Item, ...]  # one per q entry; a blank entry has no sentences and comes back as it was
    tokens: tuple[tuple[int, ...], ...]  # source tokens of every sentence of every item (the batching cost)
    beam_size: int
    num_hypotheses: int  # 1 + the alternatives asked for
    as_list: bool  # q was a list, so the response holds lists
    n_chars: int
    detected: tuple[Detection, ...] | None = None  # one per item under source=auto, else None
    texts: tuple[str, ...] = ()  # each q entry as sent (lone surrogates replaced): what a passed-through item returns

    def passed(self, index: int) -> str | None:
        """Item ``index`` as sent when its source is the target (nothing to translate), else None."""
        if self.sources[index] != self.target:
            return None
        return self.texts[index] if self.texts else self.items[index].rejoin(self.items[index].sentences)

    @property
    def sentences(self) -> list[tuple[str, str, int]]:
        """(source language, sentence, tokens) of every item, flattened in order: what is queued (a sentence whose
        source is the target language is passed through instead)."""
        return [
            (source, s, n)
            for source, item, counts in zip(self.sources, self.items, self.tokens, strict=True)
            for s, n in zip(item.sentences, counts, strict=True)
        ]


AUTO = "auto"


class RoutedCounting(Protocol):
    """A translator in front of several models (``routing.RoutingTranslator``): a sentence is counted by the tokenizer
    of the model its pair is routed to, against that model's limit."""

    def counter_for(self, source: str, target: str) -> tuple[Callable[[str], int], int]: ...


def validate_request(
    req: TranslateRequest, settings: Settings, translator: TranslatorLike, detector: LanguageDetector | None = None
) -> TranslationJob:
    """Check ``req`` against the settings' limits and the model; cut its texts into sentences.

    ``source: "auto"`` needs ``detector`` (``transduce.service.detect.get_detector`` over ``model_languages``)."""
    req = _known_case(req, translator)
    texts = [req.q] if isinstance(req.q, str) else list(req.q)
    if isinstance(req.q, list) and not req.q:
        raise ApiError(400, "q is an empty list: send at least one text")
    n_chars = check_counts(texts, settings)
    auto = auto_candidates(req.target, translator, detector) if req.source == AUTO else None
    if auto is None:
        check_route(translator, req.source, req.target)
    if req.alternatives > settings.max_alternatives:
        raise ApiError(
            400, f"alternatives {req.alternatives} is over the limit of {settings.max_alternatives} (max_alternatives)"
        )
    beam_size = _beam_size(req, settings)
    _check_glossary(req, settings)
    cleaned = [clean_text(t) for t in texts]
    html = [parse_html(t) for t in cleaned] if req.format == "html" else None
    plain = (
        [h.text for h in html] if html is not None else cleaned
    )  # detection reads the text without markup, terms as sent
    detected = tuple(auto[0].detect(t, auto[1]) for t in plain) if auto else None
    sources = tuple(d.language for d in detected) if detected else (req.source,) * len(texts)
    unknown: Callable[[str], list[str]] | None = getattr(translator, "unknown_runs", None)
    terms = {source: _terms(settings, source, req.target, req.glossary or ()) for source in set(sources)}  # once
    items: tuple[Item, ...] = tuple(
        _masked(
            html[i] if html is not None else text,
            terms[source],
            kept_as_written(unknown(plain[i])) if unknown is not None and source != req.target else (),
        )
        for i, (text, source) in enumerate(zip(cleaned, sources, strict=True))
    )
    counters = {source: pair_counter(translator, source, req.target) for source in set(sources)}
    tokens = tuple(
        tuple(_count_tokens(s, settings, counters[source]) for s in item.sentences)
        for item, source in zip(items, sources, strict=True)
    )
    return TranslationJob(
        sources=sources,
        target=req.target,
        items=items,
        tokens=tokens,
        beam_size=beam_size,
        num_hypotheses=req.alternatives + 1,
        as_list=isinstance(req.q, list),
        n_chars=n_chars,
        detected=detected,
        texts=tuple(cleaned),
    )


def check_counts(texts: Sequence[str], settings: Settings) -> int:
    """The characters of ``texts`` (a request's q), within max_items (else 400) and max_chars (else 413): the one
    count of both, for /translate and /detect."""
    if len(texts) > settings.max_items:
        raise ApiError(400, f"q has {len(texts)} texts, over the limit of {settings.max_items} (max_items)")
    return check_chars(sum(len(t) for t in texts), settings)


def check_chars(n_chars: int, settings: Settings) -> int:
    """``n_chars`` when within max_chars (the one check of that limit, for /translate and /detect), else 413."""
    if n_chars > settings.max_chars:
        raise ApiError(
            413, f"request ({n_chars} characters) exceeds the limit of {settings.max_chars} characters (max_chars)"
        )
    return n_chars


def _known_case(req: TranslateRequest, translator: TranslatorLike) -> TranslateRequest:
    """``req`` with its codes as ``known_case`` reads them."""
    source, target = known_case(translator, req.source, req.target)
    if (source, target) == (req.source, req.target):
        return req
    return req.model_copy(update={"source": source, "target": target})


def known_case(translator: TranslatorLike, *codes: str) -> list[str]:
    """``codes`` with ``EN``, ``De`` or ``AUTO`` read as the ``en``, ``de`` and ``auto`` the server knows: a language
    code's case means nothing (ISO 639, BCP 47), and people type either. A code that matches no language, or more
    than one by case alone, is left as sent for the pair check to answer."""
    return spelt_as_known([*model_languages(translator), AUTO], codes)


def check_route(translator: TranslatorLike, source: str, target: str) -> None:
    """The engine's UnsupportedLanguageError unless the model translates ``source`` into ``target``, or both are one
    language the model reads or writes: that text is passed through as it is, as LibreTranslate answers it (a client
    that translates everything into the reader's language sends such requests)."""
    if source != target or source not in model_languages(translator):
        translator.check_pair(source, target)


def model_languages(translator: TranslatorLike) -> list[str]:
    """Every language the model reads or writes, sorted: what detection chooses among."""
    return sorted({lang for pair in translator.pairs for lang in pair})


def auto_candidates(
    target: str, translator: TranslatorLike, detector: LanguageDetector | None
) -> tuple[LanguageDetector, list[str]]:
    """The detector and the languages a text may be detected as when translating into ``target``: those the model
    translates into ``target``, then ``target`` itself (last, so a text without evidence is translated rather than
    passed through). 400 when the model cannot produce ``target`` or the detector knows none of those sources."""
    sources = sorted({s for s, t in translator.pairs if t == target and s != target})
    if not sources:
        produced = sorted({t for _, t in translator.pairs})
        raise ApiError(
            400,
            f"source=auto: the model does not translate into {target!r} (it translates into "
            f"{', '.join(produced)}; see /languages)",
        )
    if detector is None:
        raise ApiError(400, "source=auto (language detection) is not available here: name the source language")
    known = [s for s in sources if s in detector.labels]
    if not known:
        raise ApiError(
            400,
            f"source=auto: language detection does not know {', '.join(sources)} (the languages the model translates "
            f"into {target!r} from): name the source language",
        )
    return detector, [*known, target]


def _beam_size(req: TranslateRequest, settings: Settings) -> int:
    """The beam that decodes the request, within max_beam_size: a beam of k keeps k translations, the best and
    k - 1 alternatives.

    A beam_size the request names must leave room for its alternatives (400 otherwise: never silently widened);
    without one, the server's default (never over max_beam_size: Settings refuses that) is widened to fit them."""
    needed = req.alternatives + 1
    if req.beam_size is not None and needed > req.beam_size:
        raise ApiError(
            400,
            f"alternatives {req.alternatives} needs beam_size {needed} or more, but beam_size is {req.beam_size} "
            f"(a beam of {req.beam_size} keeps the best translation and at most {req.beam_size - 1} alternatives)",
        )
    beam = req.beam_size if req.beam_size is not None else max(settings.default_beam_size, needed)
    if beam > settings.max_beam_size:
        asked = (
            f"beam_size {beam} is"
            if req.beam_size is not None
            else f"alternatives {req.alternatives} needs a beam of {beam},"
        )
        raise ApiError(400, f"{asked} over the limit of {settings.max_beam_size} (max_beam_size)")
    return beam


def _check_glossary(req: TranslateRequest, settings: Settings) -> None:
    """400 for a glossary over max_glossary_terms, or naming a source term twice (which target would win?)."""
    entries = req.glossary or []
    if len(entries) > settings.max_glossary_terms:
        raise ApiError(
            400,
            f"glossary has {len(entries)} terms, over the limit of {settings.max_glossary_terms} (max_glossary_terms)",
        )
    twice = duplicate(entries)
    if twice:
        raise ApiError(400, f"glossary has {twice_text(twice)}: keep one entry per source term")


def _terms(
    settings: Settings, source: str, target: str, request_terms: Sequence[GlossaryEntry] = ()
) -> tuple[Terms, Terms]:
    """The glossaries for texts translated from ``source``: the request's and the server's for the pair; none for a
    text already in the target language (passed through as it is)."""
    if source == target:
        return (), ()
    return glossaries(server_terms(settings.glossary, source, target), request_terms)


def kept_as_written(runs: Sequence[str]) -> Terms:
    """Each of ``runs`` (what the model cannot spell: emoji, other scripts, however long: a text is at most
    max_chars) as a term to keep as written (a glossary term for the same text wins: ``glossary.split_by``)."""
    return tuple((run, None) for run in runs)


def _masked(item: str | HtmlItem, terms: tuple[Terms, Terms], runs: Terms) -> Item:
    """The item cut into sentences with its terms and runs masked (exactly as without a glossary where none
    occurs)."""
    if isinstance(item, HtmlItem):
        split = splitter(terms, runs, html=True)
        return item.with_terms(split) if split is not None else item
    return mask_text(item, terms, runs)


def pair_counter(translator: TranslatorLike, source: str, target: str) -> tuple[Callable[[str], int], int]:
    """How to count a sentence of ``source`` translated into ``target``, and the model's limit."""
    if getattr(translator, "counter_for", None) is not None:  # a RoutedCounting (a Protocol isinstance is slow)
        return cast(RoutedCounting, translator).counter_for(source, target)
    return translator.count_tokens, translator.max_source_tokens


def written_tokens(sentence: str, count: Callable[[str], int]) -> int:
    """The tokens of a sentence sent with placeholders as max_sentence_tokens counts them, as written: two for each
    placeholder (a term or a run the model cannot spell, with its space) rather than its own pieces ("▁[", "1", "]");
    markup is no text at all."""
    held = len(PLACEHOLDER.findall(sentence))
    return count(PLACEHOLDER.sub(" ", sentence)) + 2 * held if held else count(sentence)


@dataclass(frozen=True)
class Fitting:
    """How validation reads a text of one pair sent with no glossary of its own: a file's pieces are cut to fit."""

    fits: Callable[[str], bool]  # whether validation takes the text (``fitting``)
    kept: Callable[[str], list[tuple[int, int]]]  # the spans it masks whole (terms, runs): never cut inside


def fitting(translator: TranslatorLike, settings: Settings, source: str, target: str) -> Fitting:
    """How validation reads a text of ``source`` sent into ``target`` with no glossary of its own: masked as
    ``validate_request`` masks it (the server's glossary for the pair, what the model cannot spell), each of its
    sentences within max_sentence_tokens and the routed model's limit."""
    counter = pair_counter(translator, source, target)
    unknown: Callable[[str], list[str]] | None = getattr(translator, "unknown_runs", None)
    terms = _terms(settings, source, target)

    @functools.lru_cache(maxsize=4)  # (kept and fits read the same unit: tokenized once)
    def runs(text: str) -> Terms:
        return kept_as_written(unknown(text)) if unknown is not None and source != target else ()

    def fits(text: str) -> bool:
        try:
            for sentence in mask_text(text, terms, runs(text)).sentences:
                _count_tokens(sentence, settings, counter)
        except InputTooLongError:
            return False
        return True

    def kept(text: str) -> list[tuple[int, int]]:
        split = splitter(terms, runs(text), html=False)
        spans, at = [], 0
        for piece in split(text) if split is not None else ():
            size = len(piece.source if isinstance(piece, Term) else piece)
            if isinstance(piece, Term):
                spans.append((at, at + size))
            at += size
        return spans

    return Fitting(fits, kept)


def _count_tokens(sentence: str, settings: Settings, counter: tuple[Callable[[str], int], int]) -> int:
    """The sentence's source tokens, within max_sentence_tokens and the model's own limit (never truncated)."""
    count, limit = counter
    n = count(sentence)
    written = written_tokens(sentence, count) if "[" in sentence else n
    if written > settings.max_sentence_tokens:
        raise InputTooLongError(
            f"a sentence has {written} tokens, over the limit of {settings.max_sentence_tokens} "
            "(max_sentence_tokens); split it"
        )
    if n > limit:
        raise InputTooLongError(
            f"a sentence has {n} tokens, over the model's limit of {limit} (its maximum "
            "source length; max_sentence_tokens cannot raise it); split it"
        )
    return n


def clean_text(text: str) -> str:
    """Replace lone surrogates (invalid Unicode) so every later step sees encodable text."""
    return text.encode("utf-8", "replace").decode("utf-8")
