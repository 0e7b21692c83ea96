"""Marian / OPUS-MT interop against transformers and CTranslate2, on tiny models built and briefly trained here."""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers", reason="transformers is a test extra for the Marian interop tests")
pytestmark = [
    pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses"),
    pytest.mark.usefixtures("one_torch_thread"),
]
import sentencepiece as spm  # noqa: E402
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

from transduce.interop.marian import import_marian  # noqa: E402
from transduce.interop.marian_export import export_marian  # noqa: E402
from transduce.model.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from transduce.model.config import ModelConfig  # noqa: E402
from transduce.model.transformer import Transformer  # noqa: E402

TOL = 1e-4
_SRC = "the a house cat dog runs sees big small red blue green water light day night good old new world"
_TGT = "das ein Haus Katze Hund rennt sieht gross klein rot blau grün Wasser Licht Tag Nacht gut alt neu Welt"
SRC_WORDS, TGT_WORDS = _SRC.split(), _TGT.split()  # word i translates to word i
SOURCES = ["The cat sees the dog.", "A big red house", "Good night, old world!", "water", "the small blue dog runs"]
MORE_SOURCES = [*SOURCES, "the dog sees a cat", "Red water, blue light.", "new day", "a good old house sees the night"]
MAX_NEW = 12


def _sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))).capitalize() + "." for _ in range(n)]


def _train_spm(sentences: list[str], vocab_size: int) -> bytes:
    buf = io.BytesIO()
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(sentences), model_writer=buf, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, num_threads=1,
    )  # fmt: skip
    return buf.getvalue()


def toy_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Word-by-word English -> German sentence pairs: enough for a tiny model to learn a real, varied mapping."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        idx = [rng.randrange(len(SRC_WORDS)) for _ in range(rng.randint(1, 6))]
        out.append((" ".join(SRC_WORDS[i] for i in idx), " ".join(TGT_WORDS[i] for i in idx)))
    return out


def train_briefly(loss: Callable[[list[int]], torch.Tensor], params: Any, n: int, steps: int = 200) -> None:
    """A few hundred Adam steps (a couple of seconds): random-weight decoders just repeat one token."""
    torch.manual_seed(0)
    rng = random.Random(0)
    opt = torch.optim.Adam(params, lr=3e-3)
    for _ in range(steps):
        value = loss(rng.sample(range(n), 32))
        opt.zero_grad()
        value.backward()
        opt.step()


def build_hf_marian(out: Path, seed: int = 0) -> Path:
    """An OPUS-MT-like directory: separate source/target spm, a shuffled shared vocab.json, briefly trained weights."""
    src_spm, tgt_spm = _train_spm(_sentences(SRC_WORDS, 800, 1), 60), _train_spm(_sentences(TGT_WORDS, 800, 2), 60)
    pieces: list[str] = []
    for data in (src_spm, tgt_spm):
        sp = spm.SentencePieceProcessor()
        sp.LoadFromSerializedProto(data)
        for i in range(sp.GetPieceSize()):
            if not (sp.IsControl(i) or sp.IsUnknown(i)) and sp.IdToPiece(i) not in pieces:
                pieces.append(sp.IdToPiece(i))
    random.Random(seed).shuffle(pieces)  # ids unrelated to either spm's ids, as in OPUS-MT
    tokens = ["</s>", "<unk>", *pieces, "<pad>"]
    V = len(tokens)
    out.mkdir(parents=True)
    (out / "source.spm").write_bytes(src_spm)
    (out / "target.spm").write_bytes(tgt_spm)
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))
    config = MarianConfig(
        vocab_size=V, decoder_vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        activation_function="swish", scale_embedding=True, pad_token_id=V - 1, decoder_start_token_id=V - 1,
        eos_token_id=0, forced_eos_token_id=None, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    tok = MarianTokenizer.from_pretrained(out)
    pairs = toy_pairs(600)
    src = [tok(s).input_ids for s, _ in pairs]
    tgt = [tok(text_target=t).input_ids for _, t in pairs]

    def loss(batch: list[int]) -> torch.Tensor:
        ids, mask = _batch([src[i] for i in batch], V - 1)
        labels, label_mask = _batch([tgt[i] for i in batch], V - 1)
        return model(input_ids=ids, attention_mask=mask, labels=labels.masked_fill(label_mask == 0, -100)).loss

    model.train()
    train_briefly(loss, model.parameters(), len(pairs))
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(seed))  # exercise the bias
    model.save_pretrained(out)
    return out


def build_native(tiny_checkpoint: Path, out: Path) -> Path:
    """A transduce-native checkpoint (interleaved sinusoids, relu, pad 0, start = bos, tags, logits bias), trained."""
    base = load_checkpoint(tiny_checkpoint)
    config = ModelConfig.from_dict({**base.config.to_dict(), "final_logits_bias": True})
    assert config.sinusoid_layout == "interleaved" and config.decoder_start_id == config.bos_id != config.pad_id
    model = Transformer(config)
    model.load_state_dict(base.model.state_dict(), strict=False)
    tok = base.tokenizer()
    pairs = toy_pairs(600)
    src = [tok.encode_source(s, "de") for s, _ in pairs]
    tgt = [[config.bos_id, *tok.encode(t), config.eos_id] for _, t in pairs]

    def loss(batch: list[int]) -> torch.Tensor:
        ids, mask = _batch([src[i] for i in batch], config.pad_id)
        dec, _ = _batch([tgt[i] for i in batch], config.pad_id)
        logits = model(ids, mask.bool(), dec[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), dec[:, 1:].flatten(), ignore_index=config.pad_id)

    model.train()
    train_briefly(loss, model.parameters(), len(pairs))
    assert model.logits_bias is not None
    with torch.no_grad():
        model.logits_bias.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    save_checkpoint(out, model.eval(), base.tokenizer_model, meta={"name": "native", "pairs": [["en", "de"]]})
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_hf_marian(tmp_path_factory.mktemp("hf") / "opus-mt-en-de")


@pytest.fixture(scope="module")
def native(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_native(tiny_checkpoint, tmp_path_factory.mktemp("native") / "native.pt")


@pytest.fixture(scope="module")
def hf_model(hf_dir: Path) -> MarianMTModel:
    return MarianMTModel.from_pretrained(hf_dir).eval()


@pytest.fixture(scope="module")
def hf_tok(hf_dir: Path) -> MarianTokenizer:
    return MarianTokenizer.from_pretrained(hf_dir)


@pytest.fixture(scope="module")
def imported(hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported") / "marian.pt"
    report = import_marian(hf_dir, out)
    assert report.pair == ("en", "de") and report.missing_from_vocab == 0 and not report.decoder_start_folded
    assert report.target_only > 0  # the German-only pieces: decodable, never produced when encoding English
    return out


@pytest.fixture(scope="module")
def exported(native: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exported") / "hf"
    report = export_marian(native, out)
    assert report.permuted_from_interleaved and report.pad_id == report.vocab_size - 1
    return out


def _batch(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    S = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), S), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), S), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
    return ids, mask


def _hf_generate(model: MarianMTModel, seqs: list[list[int]], **kwargs: Any) -> list[list[int]]:
    """Generated ids without the start token, eos and padding (padded batch, as HF users run it)."""
    pad = model.config.pad_token_id
    assert pad is not None
    ids, mask = _batch(seqs, pad)
    # generate()'s typing changes between transformers releases (5.24 fixed the self type 5.23 got wrong)
    generate = cast(Any, model).generate
    with torch.no_grad():
        out = generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False, forced_eos_token_id=None,
            **kwargs,
        )  # fmt: skip
    eos = model.config.eos_token_id
    result = []
    for row in out[:, 1:].tolist():
        result.append([t for t in row[: row.index(eos) if eos in row else len(row)] if t != pad])
    return result


def _ours_greedy(model: Transformer, seq: list[int], steps: int = MAX_NEW) -> list[int]:
    src = torch.tensor([seq])
    mask = torch.ones_like(src, dtype=torch.bool)
    with torch.no_grad():
        cross, cache = model.cross_kv(model.encode(src, mask)), None
        tok, out = model.config.decoder_start_id, []
        for _ in range(steps):
            logits, cache = model.decode_step(torch.tensor([[tok]]), cross, mask, cache)
            tok = int(logits[0, -1].argmax())
            if tok == model.config.eos_id:
                break
            out.append(tok)
    return out


def _teacher_forced(hf: MarianMTModel, ours: Transformer, seqs: list[list[int]], targets: list[list[int]]) -> tuple:
    """(HF logits, our logits) for the same source ids and decoder inputs (start token + targets, unpadded)."""
    src, mask = _batch(seqs, ours.config.pad_id)
    T = max(len(t) for t in targets)
    tgt = torch.full((len(seqs), T + 1), ours.config.decoder_start_id, dtype=torch.long)
    for i, t in enumerate(targets):
        tgt[i, 1 : len(t) + 1] = torch.tensor(t)
        tgt[i, len(t) + 1 :] = ours.config.eos_id
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=_hf_start(hf, tgt)).logits
        mine = ours(src, mask.bool(), tgt)
    return theirs, mine


def _hf_start(hf: MarianMTModel, tgt: torch.Tensor) -> torch.Tensor:
    tgt = tgt.clone()
    tgt[:, 0] = hf.config.decoder_start_token_id
    return tgt


def test_tokenizer_matches_marian_tokenizer(imported: Path, hf_tok: MarianTokenizer) -> None:
    tok = load_checkpoint(imported).tokenizer()
    texts = [*SOURCES, "Grün Haus, über €uro 42!", "  extra   spaces ", ""]
    for text in texts:
        assert tok.encode_source(text) == hf_tok(text).input_ids, text
    ids = hf_tok("Das Haus ist grün Welt.").input_ids[:-1] + hf_tok("Katze rennt").input_ids
    assert tok.unk_id not in ids  # unknown pieces decode differently by design: SentencePiece's " ⁇ " vs "<unk>"
    assert tok.decode(ids) == hf_tok.decode(ids, skip_special_tokens=True) == "Das Haus ist grün Welt. Katze rennt"


def test_import_logits_match_transformers(imported: Path, hf_model: MarianMTModel, hf_tok: MarianTokenizer) -> None:
    ckpt = load_checkpoint(imported)
    assert (ckpt.config.pad_id, ckpt.config.eos_id, ckpt.config.decoder_start_id) == (
        hf_model.config.pad_token_id,
        0,
        hf_model.config.pad_token_id,
    )
    seqs = [hf_tok(s).input_ids for s in SOURCES]
    rng = np.random.default_rng(0)
    targets = [rng.integers(2, ckpt.config.tgt_vocab_size - 1, size=n).tolist() for n in (7, 3, 9, 1, 5)]
    theirs, mine = _teacher_forced(hf_model, ckpt.model, seqs, targets)
    diff = (theirs - mine).abs().max().item()
    lp_diff = (theirs.log_softmax(-1) - mine.log_softmax(-1)).abs().max().item()
    print(f"import: max |logit diff| {diff:.2e}, max |log-prob diff| {lp_diff:.2e}")
    assert diff <= TOL and lp_diff <= TOL


def test_ban_pad_matches_bad_words_ids(
    hf_dir: Path, hf_model: MarianMTModel, hf_tok: MarianTokenizer, tmp_path: Path
) -> None:
    report = import_marian(hf_dir, tmp_path / "banned.pt", ban_pad=True)
    ckpt = load_checkpoint(tmp_path / "banned.pt")
    pad = ckpt.config.pad_id
    assert report.pad_banned and float(ckpt.model.logits_bias.detach()[pad]) < -1000  # type: ignore[union-attr]
    seqs = [hf_tok(s).input_ids for s in SOURCES]
    theirs = _hf_generate(hf_model, seqs, num_beams=1, bad_words_ids=[[pad]])
    assert [_ours_greedy(ckpt.model, s) for s in seqs] == theirs
    src = torch.tensor([seqs[0]])
    dec = torch.tensor([[pad, *theirs[0]]])
    with torch.no_grad():
        a = hf_model(input_ids=src, decoder_input_ids=dec).logits
        b = ckpt.model(src, torch.ones_like(src, dtype=torch.bool), dec)
    assert (a[..., :pad] - b[..., :pad]).abs().max().item() <= TOL


def test_onnx_engine_matches_transformers(
    imported: Path, hf_model: MarianMTModel, hf_tok: MarianTokenizer, tmp_path: Path
) -> None:
    from transduce.engine.options import DecodeOptions
    from transduce.engine.translator import Translator
    from transduce.export.onnx_export import export_model

    export_model(imported, tmp_path / "onnx")
    translator = Translator(tmp_path / "onnx", device="cpu", intra_threads=1)
    assert translator.pairs == [("en", "de")]
    seqs = [hf_tok(s).input_ids for s in MORE_SOURCES]
    greedy_hf = _hf_generate(hf_model, seqs, num_beams=1)
    assert sum(len(g) < MAX_NEW for g in greedy_hf) >= 2, "some translations should end with eos"
    opts: dict[str, Any] = {"length_penalty": 0.0, "min_decoding_length": 0, "max_decoding_length": MAX_NEW}
    greedy = [r.tokens[0] for r in translator.translate_batch(seqs, options=DecodeOptions(beam_size=1, **opts))]
    assert greedy == greedy_hf
    beam_hf = _hf_generate(hf_model, seqs, num_beams=4, length_penalty=0.0, early_stopping=True)
    beam = [r.tokens[0] for r in translator.translate_batch(seqs, options=DecodeOptions(beam_size=4, **opts))]
    assert beam == beam_hf
    assert beam != greedy, "the beam comparison should exercise a case where beam search differs from greedy"
    texts = translator.translate(
        MORE_SOURCES, source_lang="en", target_lang="de", options=DecodeOptions(beam_size=1, **opts)
    )
    unk = hf_tok.unk_token_id
    for text, ids in zip(texts, greedy_hf, strict=True):
        if unk not in ids:  # <unk> renders as SentencePiece's " ⁇ " here, as for every transduce model
            assert text.hypotheses[0] == hf_tok.decode(ids, skip_special_tokens=True)
    # log-probs of the engine's decoder, teacher-forced on HF's greedy outputs
    worst = 0.0
    for seq, out in zip(seqs, greedy_hf, strict=True):
        state = translator.runner.encode(np.array([seq]), np.ones((1, len(seq)), dtype=np.int64))
        tgt = [hf_model.config.decoder_start_token_id, *out]
        with torch.no_grad():
            ref = hf_model(input_ids=torch.tensor([seq]), decoder_input_ids=torch.tensor([tgt])).logits.log_softmax(-1)
        for t, tok in enumerate(tgt):
            lp = translator.runner.step(np.array([tok]), state)
            worst = max(worst, float(np.abs(lp[0] - ref[0, t].numpy()).max()))
    print(f"onnx engine: max |log-prob diff| vs transformers {worst:.2e}")
    assert worst <= TOL


def test_a_language_pair_is_read_from_the_name_or_given_as_codes(tmp_path: Path) -> None:
    """``--source-lang 'not a lang'`` was imported and served as the pair "not a lang->en"."""
    from transduce.interop.marian import _languages

    named = tmp_path / "opus-mt-en-zh_cn"
    named.mkdir()
    assert _languages(named, {}, None, None) == ("en", "zh_cn")
    assert _languages(named, {}, "pt-BR", "de") == ("pt-BR", "de")
    with pytest.raises(ValueError, match="'not a lang' is not a language code such as en, de or pt-BR"):
        _languages(named, {}, "not a lang", None)
    with pytest.raises(ValueError, match="cannot tell the language pair"):
        _languages(tmp_path, {}, None, None)
    from transduce.cli import main

    assert main(["import-marian", str(named), str(tmp_path / "out"), "--target-lang", "not a lang"]) == 2
    assert not (tmp_path / "out").exists()  # a bad option: 2, before anything is read or written


def test_export_marian_runs_our_weights_in_transformers(exported: Path, native: Path) -> None:
    modes = {f.name: f.stat().st_mode & 0o777 for f in exported.iterdir() if f.is_file()}
    assert len(set(modes.values())) == 1, modes  # (safetensors wrote its file 0600, the others as the umask says)
    ckpt = load_checkpoint(native)
    V = ckpt.config.tgt_vocab_size
    hf = MarianMTModel.from_pretrained(exported).eval()
    assert hf.config.vocab_size == V + 1
    tok = ckpt.tokenizer()
    seqs = [tok.encode_source(s, "de") for s in SOURCES]
    rng = np.random.default_rng(1)
    targets = [rng.integers(4, V, size=n).tolist() for n in (6, 2, 8, 4, 5)]
    theirs, mine = _teacher_forced(hf, ckpt.model, seqs, targets)
    diff = (theirs[..., :V] - mine).abs().max().item()
    lp_diff = (theirs.log_softmax(-1)[..., :V] - mine.log_softmax(-1)).abs().max().item()
    print(f"export: max |logit diff| {diff:.2e}, max |log-prob diff| {lp_diff:.2e}")
    assert diff <= TOL and lp_diff <= TOL
    assert bool((theirs.log_softmax(-1)[..., V] < -1000).all()), "the appended pad row must have probability 0"
    # the stored tables are Marian's own sinusoids (the interleaved layout was permuted away), except the folded
    # decoder position 0 that carries our start token
    for stack in (hf.model.encoder, hf.model.decoder):
        table = stack.embed_positions
        assert (table.weight[1:] - table.create_weight()[1:]).abs().max().item() <= 1e-6
    assert (
        hf.model.encoder.embed_positions.weight[0] - hf.model.encoder.embed_positions.create_weight()[0]
    ).abs().max() <= 1e-6
    assert _hf_generate(hf, seqs, num_beams=1) == [_ours_greedy(ckpt.model, s) for s in seqs]
    hf_tok = MarianTokenizer.from_pretrained(exported)
    for s in SOURCES:
        assert hf_tok(s).input_ids == tok.encode(s) + [tok.eos_id]


def test_ctranslate2_matches_transformers_on_export(exported: Path, native: Path, tmp_path: Path) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed")
    from ctranslate2.converters import TransformersConverter

    ct2_dir = TransformersConverter(str(exported)).convert(str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(ct2_dir, device="cpu", intra_threads=1)
    hf = MarianMTModel.from_pretrained(exported).eval()
    hf_tok = MarianTokenizer.from_pretrained(exported)
    ckpt = load_checkpoint(native)
    tok = ckpt.tokenizer()
    seqs = [tok.encode_source(s, "de") for s in SOURCES]
    pieces = [hf_tok.convert_ids_to_tokens(s) for s in seqs]
    greedy_hf = _hf_generate(hf, seqs, num_beams=1)
    results = translator.translate_batch(pieces, beam_size=1, max_decoding_length=MAX_NEW, length_penalty=0.0)
    greedy_ct2 = [hf_tok.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
    assert greedy_ct2 == greedy_hf == [_ours_greedy(ckpt.model, s) for s in seqs]
    # scores of the same (source, target) pairs: CTranslate2 vs transformers log-probs, eos included
    targets = [g if g else [5] for g in greedy_hf]
    scored = translator.score_batch(pieces, [hf_tok.convert_ids_to_tokens(t) for t in targets])
    worst = 0.0
    for seq, tgt, res in zip(seqs, targets, scored, strict=True):
        dec_in = torch.tensor([[hf.config.decoder_start_token_id, *tgt]])
        with torch.no_grad():
            lp = hf(input_ids=torch.tensor([seq]), decoder_input_ids=dec_in).logits.log_softmax(-1)[0]
        ref = [float(lp[t, tok_id]) for t, tok_id in enumerate([*tgt, hf.config.eos_token_id])]
        worst = max(worst, float(np.abs(np.array(res.log_probs) - np.array(ref)).max()))
    print(f"ctranslate2: max |token log-prob diff| vs transformers {worst:.2e}")
    assert worst <= TOL


def test_import_of_own_export_round_trips(exported: Path, native: Path, tmp_path: Path) -> None:
    report = import_marian(exported, tmp_path / "back.pt", name="back")
    assert report.decoder_start_folded and report.pair == ("en", "de")
    ours, back = load_checkpoint(native), load_checkpoint(tmp_path / "back.pt")
    V = ours.config.tgt_vocab_size
    seqs = [ours.tokenizer().encode_source(s, "de") for s in SOURCES[:3]]
    src, mask = _batch(seqs, ours.config.pad_id)
    src_back = src.masked_fill(mask == 0, back.config.pad_id)
    tgt = torch.tensor([[ours.config.decoder_start_id, 7, 9, 11]] * 3)
    tgt_back = tgt.clone()
    tgt_back[:, 0] = back.config.decoder_start_id
    with torch.no_grad():
        a = ours.model(src, mask.bool(), tgt).log_softmax(-1)
        b = back.model(src_back, mask.bool(), tgt_back).log_softmax(-1)
    assert (a - b[..., :V]).abs().max().item() <= TOL
    assert back.tokenizer().encode("The cat sees the dog.") == ours.tokenizer().encode("The cat sees the dog.")


def test_the_round_trip_gives_a_tagged_model_its_tag_and_directions_back(
    exported: Path, native: Path, tmp_path: Path
) -> None:
    """A tagged model (the shipped one is) came back untagged and with one direction: the engine then encoded its
    sources without the <2xx> tag and translated differently (the test above feeds tags by hand to both)."""
    import_marian(exported, tmp_path / "back.pt", name="back")
    ours, back = load_checkpoint(native), load_checkpoint(tmp_path / "back.pt")
    assert ours.config.target_tag and back.config.target_tag == ours.config.target_tag
    assert back.config.languages == ours.config.languages
    declared = ours.meta.get("pairs") or [["de", "en"], ["en", "de"]]  # its directions, as declared or all
    assert sorted(map(tuple, back.meta["pairs"])) == sorted(map(tuple, declared))
    for source in SOURCES[:3]:  # the engine's own encoding, tag and all, is the same for both
        for lang in ("de", "en"):
            assert back.tokenizer().encode_source(source, lang) == ours.tokenizer().encode_source(source, lang)
    import_marian(exported, tmp_path / "one.pt", source_lang="en", target_lang="de")  # one direction, tag kept
    one = load_checkpoint(tmp_path / "one.pt")
    assert one.config.target_tag == ours.config.target_tag and one.meta["pairs"] == [["en", "de"]]
    with pytest.raises(ValueError, match="en->fr is not a direction of this model"):
        import_marian(exported, tmp_path / "fr.pt", source_lang="en", target_lang="fr")
    recorded = json.loads((exported / "config.json").read_text())["transduce_model"]
    damaged = tmp_path / "damaged"
    shutil.copytree(exported, damaged)
    config = json.loads((damaged / "config.json").read_text())
    (damaged / "config.json").write_text(
        json.dumps({**config, "transduce_model": {**recorded, "pairs": [["en", "xx"]]}})
    )
    with pytest.raises(ValueError, match="transduce_model is damaged"):
        import_marian(damaged, tmp_path / "x.pt")


def test_refusals_name_the_problem(tiny_checkpoint: Path, hf_dir: Path, tmp_path: Path) -> None:
    ckpt = load_checkpoint(tiny_checkpoint)
    three = Transformer(
        ModelConfig.from_dict({**ckpt.config.to_dict(), "target_tag": "", "languages": ["de", "en", "fr"]})
    )
    save_checkpoint(tmp_path / "three.pt", three, ckpt.tokenizer_model)  # untagged, no pairs: which direction?
    with pytest.raises(ValueError, match="names no direction to translate"):  # (an unpacking error)
        export_marian(tmp_path / "three.pt", tmp_path / "three")
    pre = Transformer(ModelConfig.from_dict({**ckpt.config.to_dict(), "norm_position": "pre"}))
    save_checkpoint(tmp_path / "pre.pt", pre, ckpt.tokenizer_model)
    with pytest.raises(ValueError, match="post-norm"):
        export_marian(tmp_path / "pre.pt", tmp_path / "out")
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in hf_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "normalize_before": True}))
    with pytest.raises(ValueError, match="normalize_before"):
        import_marian(bad, tmp_path / "x.pt")
    (bad / "config.json").write_text(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] + 1}))
    with pytest.raises(ValueError, match="vocab"):
        import_marian(bad, tmp_path / "x.pt")


def test_a_damaged_marian_directory_or_an_output_inside_it_is_a_value_error(hf_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in hf_dir.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ValueError, match="would overwrite the input"):
        import_marian(bad, bad / "model.safetensors")
    cfg = json.loads((bad / "config.json").read_text())
    for damage in ({**cfg, "eos_token_id": []}, {**cfg, "encoder_attention_heads": 0}, [cfg]):
        (bad / "config.json").write_text(json.dumps(damage))
        with pytest.raises(ValueError):
            import_marian(bad, tmp_path / "x.pt")
    (bad / "config.json").write_text(json.dumps(cfg))
    (bad / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")  # cut short
    with pytest.raises(ValueError, match="cannot read the weights"):
        import_marian(bad, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists() and not list(tmp_path.glob("*.tmp"))


def test_cli_commands(hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transduce.interop import export_cli, import_cli

    parser = argparse.ArgumentParser()
    import_cli.add_arguments(parser)
    assert import_cli.run(parser.parse_args([str(hf_dir), str(tmp_path / "m.pt")])) == 0
    assert json.loads(capsys.readouterr().out)["pair"] == ["en", "de"]
    assert import_cli.run(parser.parse_args([str(tmp_path / "nope"), str(tmp_path / "n.pt")])) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("transduce import-marian:") and "\n" not in err
    parser = argparse.ArgumentParser()
    export_cli.add_arguments(parser)
    assert export_cli.run(parser.parse_args([str(tmp_path / "m.pt"), str(tmp_path / "hf")])) == 0
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "vocab.json").is_file()
    assert export_cli.run(parser.parse_args([str(tmp_path / "missing.pt"), str(tmp_path / "hf2")])) == 1
    assert "\n" not in capsys.readouterr().err.strip()
