"""Vocabulary shortlist: the table, its builder on a small corpus, the export, and equivalence with the full
vocabulary (the reference) when the candidates hold every step's best token."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.tiny import DE, EN, table_of
from transduce.engine import io_names as names
from transduce.engine.manifest import is_stale, load_manifest
from transduce.engine.options import DecodeOptions
from transduce.engine.runner import DecoderState
from transduce.engine.shortlist import (
    NO_TAG,
    Shortlist,
    ShortlistConfig,
    ShortlistTable,
    load_table,
    peak_for,
    quantize_rows,
)
from transduce.engine.translator import Translator
from transduce.export.onnx_export import ExportConfig, export_model
from transduce.model.checkpoint import load_checkpoint
from transduce.training.shortlist import ShortlistBuildConfig, build_table, directions, read_pairs

SENTENCES = ["the house", "a small cat sees the dog", "hello world", "the red light runs", "good night"]


def with_table(translator: Translator, frequent: list[int]) -> Translator:
    """``translator`` with its shortlist replaced by one whose candidates are ``frequent`` (plus eos, unk, source)."""
    current = translator.runner.sessions.shortlist
    assert current is not None
    keys = list(current.table.offsets)
    assert current.projection is not None
    translator.runner.sessions.shortlist = Shortlist(
        table_of(current.vocab_size, keys, frequent),
        current.projection,
        always=current.always.tolist(),
        config=ShortlistConfig(frequent=len(frequent)),
    )
    return translator


def test_export_writes_the_shortlist_graph_and_table(shortlist_model_dir: Path, tiny_model_dir: Path) -> None:
    manifest = load_manifest(shortlist_model_dir)  # checks every listed file against its checksum
    assert manifest.has_shortlist and not load_manifest(tiny_model_dir).has_shortlist
    raw = json.loads((shortlist_model_dir / "manifest.json").read_text())
    assert {"shortlist.npz", "decoder_shortlist.onnx"} <= set(raw["checksums"])
    table, projection = load_table(shortlist_model_dir / "shortlist.npz")
    assert projection is not None and projection.shape[0] == manifest.vocab_size == table.vocab_size


def test_full_candidate_set_reproduces_the_full_vocabulary(shortlist_model_dir: Path, tiny_model_dir: Path) -> None:
    full = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    short = Translator(shortlist_model_dir, device="cpu", intra_threads=1)
    with_table(short, list(range(full.manifest.vocab_size)))
    for beam in (1, 4):
        options = DecodeOptions(beam_size=beam, return_scores=True, num_hypotheses=beam)
        a = full.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
        b = short.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
        assert [r.tokens for r in a] == [r.tokens for r in b]
        np.testing.assert_allclose([r.scores for r in a], [r.scores for r in b], atol=1e-4)


def test_greedy_is_identical_when_the_candidates_hold_every_best_token(
    shortlist_model_dir: Path, tiny_model_dir: Path
) -> None:
    full = Translator(tiny_model_dir, device="cpu", intra_threads=1, shortlist=False)
    reference = full.translate(SENTENCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=1))
    produced = sorted({t for r in reference for t in r.tokens[0]})
    short = with_table(Translator(shortlist_model_dir, device="cpu", intra_threads=1), produced)
    shortlist = short.runner.sessions.shortlist
    assert shortlist is not None
    sources = [short.tokenizer.encode_source(s, "de") for s in SENTENCES]
    assert len(shortlist.candidates(sources)) < full.manifest.vocab_size // 2  # a real restriction
    got = short.translate(SENTENCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=1))
    assert [r.tokens for r in got] == [r.tokens for r in reference]
    assert [r.hypotheses for r in got] == [r.hypotheses for r in reference]


def test_the_output_stays_inside_the_candidates(shortlist_model_dir: Path, tiny_model_dir: Path) -> None:
    full = Translator(tiny_model_dir, device="cpu", intra_threads=1)
    reference = full.translate(SENTENCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=1))
    produced = sorted({t for r in reference for t in r.tokens[0]})
    dropped = produced[len(produced) // 2]  # one token the full vocabulary decodes with, no longer a candidate
    short = with_table(Translator(shortlist_model_dir, device="cpu", intra_threads=1), produced[:1])
    shortlist = short.runner.sessions.shortlist
    assert shortlist is not None
    sources = [short.tokenizer.encode_source(s, "de") for s in SENTENCES]
    allowed = set(shortlist.candidates(sources).tolist())  # one batch: the union over its sentences
    assert dropped not in allowed
    for beam in (1, 4):
        got = short.translate(SENTENCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=beam))
        for result in got:
            assert set(result.tokens[0]) <= allowed
    assert [r.tokens for r in got] != [r.tokens for r in reference]


def test_shortlist_off_and_merge_guard(shortlist_model_dir: Path) -> None:
    off = Translator(shortlist_model_dir, device="cpu", intra_threads=1, shortlist=False)
    assert off.runner.sessions.shortlist is None
    on = Translator(shortlist_model_dir, device="cpu", intra_threads=1)
    state = on.runner.encode(np.array([[5, 6, 3]]), np.ones((1, 3), np.int64))
    assert on.runner.sessions.shortlist is not None
    state.projection = on.runner.sessions.shortlist.rows(np.arange(4))
    other = on.runner.encode(np.array([[5, 3]]), np.ones((1, 2), np.int64))
    with pytest.raises(ValueError, match="shortlist cannot be merged"):
        on.runner.merge(state, other)
    assert isinstance(other, DecoderState) and other.projection is None


def test_candidates_union_of_frequent_cooccurring_source_and_always() -> None:
    V = 20
    offsets = np.zeros(V + 1, np.int64)
    offsets[6:] = 3  # piece 5 -> [11, 12, 13]
    table = ShortlistTable(V, {4: np.array([7, 8, 9], np.int32)}, {4: offsets}, {4: np.array([11, 12, 13], np.int32)})
    shortlist = Shortlist(table, np.zeros((V, 2)), always=[3, 1], config=ShortlistConfig(frequent=2, per_piece=2))
    assert shortlist.candidates([[4, 5, 3]]).tolist() == [1, 3, 4, 5, 7, 8, 11, 12]
    rows = shortlist.rows(np.array([2, 5]))
    assert rows.count == 2 and rows.feeds[names.DEC_VOCAB_PROJECTION].shape == (2, 2)
    with pytest.raises(ValueError, match="CSR"):
        ShortlistTable(V, {4: np.array([1])}, {4: offsets[:-1]}, {4: np.array([11, 12, 13])})
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ShortlistTable(V, {4: np.array([25])}, {4: offsets}, {4: np.array([11, 12, 13])})
    with pytest.raises(ValueError, match="one row per vocabulary piece"):
        Shortlist(table, np.zeros((V - 1, 2)), always=[3])


@pytest.mark.parametrize("per_piece", [0, 1, 3, 50])
def test_candidates_are_each_source_pieces_first_targets(per_piece: int) -> None:
    """Pieces with more targets than per_piece, fewer, or none, and repeated source pieces, against a plain loop."""
    rng = np.random.default_rng(per_piece)
    V = 300
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 6, V))]).astype(np.int64)  # 0-5 targets per piece
    targets = rng.integers(0, V, offsets[-1]).astype(np.int32)
    table = ShortlistTable(V, {7: np.array([1, 2], np.int32)}, {7: offsets}, {7: targets})
    shortlist = Shortlist(table, np.zeros((V, 2)), always=[3], config=ShortlistConfig(frequent=1, per_piece=per_piece))
    for _ in range(20):
        source = [7, *rng.integers(0, V, int(rng.integers(1, 40))).tolist(), 3]
        expected = {3, 1, *source}
        for piece in set(source):
            expected |= set(targets[offsets[piece] : min(offsets[piece] + per_piece, offsets[piece + 1])].tolist())
        assert shortlist.sentence_candidates(source).tolist() == sorted(expected)


def test_the_unknown_piece_is_a_candidate_only_of_a_source_that_has_one() -> None:
    V, unk = 20, 1
    offsets = np.zeros(V + 1, np.int64)
    offsets[6:] = 3  # piece 5 -> [11, 1, 13]: the table (like the frequent pieces) may hold the unknown piece
    table = ShortlistTable(V, {4: np.array([1, 8], np.int32)}, {4: offsets}, {4: np.array([11, 1, 13], np.int32)})
    shortlist = Shortlist(table, np.zeros((V, 2)), always=[3], unk=unk, config=ShortlistConfig(frequent=2))
    assert shortlist.sentence_candidates([4, 5, 3]).tolist() == [3, 4, 5, 8, 11, 13]
    assert shortlist.sentence_candidates([4, 5, unk, 3]).tolist() == [1, 3, 4, 5, 8, 11, 13]  # copying it is allowed
    candidates, masks = shortlist.batch([[4, 5, 3], [4, unk, 3]])
    assert 1 in candidates.tolist() and masks[:, candidates.tolist().index(1)].tolist() == [False, True]
    same_as_eos = Shortlist(table, np.zeros((V, 2)), always=[3], unk=3, config=ShortlistConfig(frequent=2))
    assert 3 in same_as_eos.sentence_candidates([4, 5]).tolist()  # a model without its own unk id keeps eos


def test_common_single_words_never_come_back_as_the_unknown_piece(default_translator: Translator) -> None:
    """The shipped model with its shortlist: a beam search over a short candidate list used to end these as the
    unknown piece (" ⁇ ")."""
    assert default_translator.runner.sessions.shortlist is not None
    words = ["Click", "Link", "Settings", "Remove"]
    out = default_translator.translate(words, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=4))
    assert all("⁇" not in r.hypotheses[0] and r.hypotheses[0].strip() for r in out), [r.hypotheses for r in out]


def write_corpus(path: Path) -> Path:
    """A train.tsv where every English word of the tiny vocabulary appears with its German translation."""
    path.mkdir(parents=True, exist_ok=True)
    rows = ["origin\ten\tde"]
    for i in range(len(EN)):
        for j in (1, 2, 3):
            k = (i + j) % len(EN)
            rows.append(f"toy\t{EN[i]} {EN[k]}\t{DE[i]} {DE[k]}")
    (path / "train.tsv").write_text("\n".join(rows) + "\n")
    return path


def test_builder_ranks_the_translation_first(tiny_checkpoint: Path, tmp_path: Path) -> None:
    tok = load_checkpoint(tiny_checkpoint).tokenizer()
    columns, pairs = read_pairs(write_corpus(tmp_path / "corpus"), 1000, 0)
    assert columns == ("en", "de") and len(pairs) == 3 * len(EN)
    wanted = directions(columns, tok, [("en", "de"), ("de", "en")])
    table = build_table(pairs, tok, wanted, ShortlistBuildConfig(per_piece=3, frequent=5))
    de_key = tok.tag_id("de")
    assert de_key is not None and set(table.offsets) == {tok.tag_id("de"), tok.tag_id("en")}
    hits = 0
    for en, de in zip(EN, DE, strict=True):
        source, target = tok.encode(en), tok.encode(de)
        if len(source) != 1 or len(target) != 1:
            continue  # words split into several pieces share them with others
        off = table.offsets[de_key]
        hits += int(table.targets[de_key][off[source[0]] : off[source[0] + 1]][0] == target[0])
    assert hits >= 10
    assert len(table.frequent[de_key]) == 5
    with pytest.raises(ValueError, match="none of the model's pairs"):
        directions(columns, tok, [("en", "fr")])


def test_cli_builds_a_table_the_export_picks_up(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transduce.cli import main

    checkpoint = tmp_path / "ckpt" / "checkpoint.pt"
    checkpoint.parent.mkdir()
    shutil.copy(tiny_checkpoint, checkpoint)
    corpus = write_corpus(tmp_path / "corpus")
    assert main(["shortlist", "--data", str(corpus), "--checkpoint", str(checkpoint)]) == 0
    table = checkpoint.parent / "shortlist.npz"
    assert table.is_file()
    assert main(["export", str(checkpoint), str(tmp_path / "model"), "--no-verify"]) == 0
    assert load_manifest(tmp_path / "model").has_shortlist
    assert not is_stale(checkpoint, tmp_path / "model", table)
    table.write_bytes(table.read_bytes() + b"\0")
    assert is_stale(checkpoint, tmp_path / "model", table)
    assert main(["shortlist", "--data", str(tmp_path / "nowhere"), "--checkpoint", str(checkpoint)]) == 1
    capsys.readouterr()
    for out in (tmp_path / "model", tmp_path / "no" / "such" / "t.npz"):  # checked before the table is computed
        assert main(["shortlist", "--data", str(corpus), "--checkpoint", str(checkpoint), "--out", str(out)]) == 1
    assert capsys.readouterr().err.count("name a file in an existing directory") == 2  # (an OSError, after it)


def test_a_final_logits_bias_is_refused_with_what_to_do(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import torch

    from transduce.model.checkpoint import save_checkpoint
    from transduce.model.config import ModelConfig
    from transduce.model.transformer import Transformer

    base = load_checkpoint(tiny_checkpoint)
    model = Transformer(ModelConfig.from_dict({**base.config.to_dict(), "final_logits_bias": True}))
    model.load_state_dict(base.model.state_dict(), strict=False)
    with torch.no_grad():
        assert model.logits_bias is not None
        model.logits_bias.normal_(0.0, 0.1)
    save_checkpoint(tmp_path / "biased.pt", model.eval(), base.tokenizer_model)
    tok = base.tokenizer()
    table_of(tok.vocab_size, [int(tok.tag_id("de") or 0)], [tok.eos_id]).save(tmp_path / "shortlist.npz")
    with pytest.raises(ValueError, match="final logits bias.*--no-shortlist"):
        export_model(tmp_path / "biased.pt", tmp_path / "model", ExportConfig(shortlist=tmp_path / "shortlist.npz"))
    assert not (tmp_path / "model").exists()  # nothing half-written


def test_int8_quantisation_keeps_the_shortlist_quantised(
    shortlist_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnx

    from transduce.export.quantize import quantize_model_dir

    manifest = quantize_model_dir(shortlist_model_dir, tmp_path / "int8")
    assert manifest["shortlist_decoder"] == "decoder_shortlist.onnx" and "shortlist.npz" in manifest["checksums"]
    assert "decoder_shortlist.onnx.data" in manifest["checksums"]  # its weights, stored apart
    graph = onnx.load(str(tmp_path / "int8" / "decoder_shortlist.onnx")).graph
    ops = [n.op_type for n in graph.node]
    L = manifest["dims"]["n_decoder_layers"]
    # every weight matrix, and the output projection over its candidates' rows, which are an int8 input
    assert ops.count("MatMulInteger") == 6 * L and ops.count("MultiHeadAttention") == L
    assert ops.count("DynamicQuantizeMatMul") == 1 and "Transpose" not in ops[-6:]
    inputs = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    assert inputs[names.DEC_VOCAB_PROJECTION_INT8] == onnx.TensorProto.INT8
    assert inputs[names.DEC_VOCAB_PROJECTION_SCALE] == onnx.TensorProto.FLOAT
    assert names.DEC_VOCAB_PROJECTION not in inputs
    translator = Translator(tmp_path / "int8", device="cpu", intra_threads=1)  # checksums of every listed file hold
    shortlist = translator.runner.sessions.shortlist
    assert shortlist is not None and shortlist.quantized and shortlist.projection is None  # int8 rows only
    picked = np.array([3, 7, 9])
    rows = shortlist.rows(picked)
    q, scales = quantize_rows(shortlist_rows_of(shortlist_model_dir)[picked])
    assert rows.count == 3 and np.array_equal(rows.feeds[names.DEC_VOCAB_PROJECTION_INT8], q.T)
    assert np.array_equal(rows.feeds[names.DEC_VOCAB_PROJECTION_SCALE], scales)
    assert rows.feeds[names.DEC_VOCAB_PROJECTION_INT8].flags.c_contiguous
    every = shortlist.every_row()
    assert every.count == shortlist.vocab_size and every.feeds[names.DEC_VOCAB_PROJECTION_INT8].shape[1] == every.count
    # the projection alone: the same quantised export with float32 rows (an export made before the rewrite, which
    # still loads) scores one step within the rows' rounding
    monkeypatch.setattr("transduce.export.quantize.int8_projection", lambda path: None)
    quantize_model_dir(shortlist_model_dir, tmp_path / "int8-float-rows")
    float_rows = Translator(tmp_path / "int8-float-rows", device="cpu", intra_threads=1)
    assert float_rows.runner.sessions.shortlist is not None and not float_rows.runner.sessions.shortlist.quantized
    a, b = first_step(translator, "a small cat sees the dog"), first_step(float_rows, "a small cat sees the dog")
    kept = np.isfinite(b)
    assert np.array_equal(np.isfinite(a), kept) and kept.sum() > 3
    assert np.abs(a[kept] - b[kept]).max() < 0.02 * np.ptp(b[kept])
    assert float_rows.translate(["the house"], source_lang="en", target_lang="de")[0].hypotheses[0]
    for sentence in SENTENCES:
        allowed = set(shortlist.sentence_candidates(translator.tokenizer.encode_source(sentence, "de")).tolist())
        for beam in (1, 3):
            got = translator.translate(
                [sentence], source_lang="en", target_lang="de", options=DecodeOptions(beam_size=beam)
            )
            assert got[0].hypotheses[0] and set(got[0].tokens[0]) <= allowed
    full = Translator(tmp_path / "int8", device="cpu", intra_threads=1, shortlist=False)
    assert full.runner.sessions.shortlist is None
    assert full.translate(["the house"], source_lang="en", target_lang="de")[0].hypotheses[0]


def test_the_service_setting_turns_the_shortlist_off(shortlist_model_dir: Path) -> None:
    from tests.service.harness import IsolatedSettings
    from transduce.service.main import load_translator

    for enabled in (True, False):
        settings = IsolatedSettings(
            model_dir=str(shortlist_model_dir), device="cpu", intra_threads=1, shortlist=enabled
        )
        translator = load_translator(settings)
        assert isinstance(translator, Translator)
        assert (translator.runner.sessions.shortlist is not None) is enabled


@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_translates_the_same_alone_and_batched(
    shortlist_model_dir: Path, beam: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row is normalised over its own sentence's candidates (here eos, unk and its source pieces, different for
    every sentence), not the batch's union: batch-mates change nothing."""
    short = Translator(shortlist_model_dir, device="cpu", intra_threads=1)
    shortlist = short.runner.sessions.shortlist
    assert shortlist is not None and short.runner.sessions.shortlist_masks
    sources = [short.tokenizer.encode_source(s, "de") for s in SENTENCES]
    own = [set(shortlist.sentence_candidates(s).tolist()) for s in sources]
    assert all(o < set(shortlist.candidates(sources).tolist()) for o in own)  # the union is larger for everyone
    options = DecodeOptions(beam_size=beam, num_hypotheses=beam, return_scores=True)
    batched = short.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
    for text, together, mine in zip(SENTENCES, batched, own, strict=True):
        (alone,) = short.translate([text], source_lang="en", target_lang="de", options=options)
        assert together.tokens == alone.tokens
        assert together.scores == pytest.approx(alone.scores, abs=1e-4)
        assert all(set(t) <= mine for t in together.tokens)

    # normalised over the batch's union instead (as exports before revision 3 were): outputs depend on the batch
    def union_only(batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        vocab = shortlist.candidates(batch)
        return vocab, np.ones((len(batch), len(vocab)), bool)

    monkeypatch.setattr(shortlist, "batch", union_only)
    union = short.translate(SENTENCES, source_lang="en", target_lang="de", options=options)
    assert [r.tokens for r in union] != [r.tokens for r in batched]


def test_masks_mark_each_sentences_own_candidates() -> None:
    V = 12
    shortlist = Shortlist(table_of(V, [NO_TAG], [9]), np.zeros((V, 2), np.float32), always=[1])
    sources = [[4, 5], [6]]
    vocab, masks = shortlist.batch(sources)
    assert vocab.tolist() == [1, 4, 5, 6, 9]
    assert masks.tolist() == [[True, True, True, False, True], [True, False, False, True, True]]
    wider = np.arange(V)
    assert shortlist.masks(sources, wider)[1].nonzero()[0].tolist() == [1, 6, 9]
    with pytest.raises(ValueError, match="do not hold every candidate"):
        shortlist.masks(sources, np.array([1, 4, 9]))


def test_rows_are_seven_bits_on_an_x86_cpu_without_vnni() -> None:
    """onnxruntime's u8 x s8 kernels without VNNI add pairs of products into 16 bits: full-range rows saturated (a
    projection off by 7 % of its range on such a VM)."""
    assert peak_for("x86_64", ["avx2", "fma"]) == peak_for("AMD64", []) == 63
    assert peak_for("x86_64", ["avx2", "avx512_vnni"]) == peak_for("x86_64", ["avx_vnni"]) == 127
    assert peak_for("aarch64", []) == 127


@pytest.mark.parametrize("peak", [127, 63])
def test_quantized_rows_stand_for_the_float_rows_within_half_a_step(peak: int) -> None:
    rng = np.random.default_rng(0)
    projection = rng.standard_normal((50, 16)).astype(np.float32)
    projection[7] = 0.0  # a row of zeros keeps a usable scale
    q, scales = quantize_rows(projection, peak)
    assert q.dtype == np.int8 and scales.dtype == np.float32 and q.shape == projection.shape
    assert np.abs(q).max() == peak and np.all(scales > 0) and not q[7].any()
    assert np.all(np.abs(q * scales[:, None] - projection) <= scales[:, None] / 2 + 1e-7)


def shortlist_rows_of(model_dir: Path) -> np.ndarray:
    """The float32 projection rows (V, d_model) a model directory's shortlist file holds."""
    _, projection = load_table(model_dir / "shortlist.npz")
    assert projection is not None
    return projection


def first_step(translator: Translator, sentence: str) -> np.ndarray:
    """One decoder step's log-probs (1, C) over a sentence's own candidates."""
    ids = np.array([translator.tokenizer.encode_source(sentence, "de")])
    runner, shortlist = translator.runner, translator.runner.sessions.shortlist
    assert shortlist is not None
    state = runner.encode(ids, np.ones_like(ids))
    vocab, masks = shortlist.batch(ids.tolist())
    state.projection, state.vocab_mask = shortlist.rows(vocab), masks
    return runner.step(np.array([translator.manifest.decoder_start_id]), state)
