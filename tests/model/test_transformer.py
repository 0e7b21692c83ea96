"""Model tests: the cache gives the same logits as the full prefix; config round trip; checkpoint round trip."""

import re
from pathlib import Path

import pytest
import torch

from transduce.model.checkpoint import load_checkpoint, save_checkpoint
from transduce.model.config import ModelConfig
from transduce.model.layers import sinusoid_table
from transduce.model.transformer import Transformer


def tiny_config(**overrides: object) -> ModelConfig:
    values: dict[str, object] = {
        "src_vocab_size": 60,
        "tgt_vocab_size": 60,
        "d_model": 32,
        "n_heads": 4,
        "d_ff": 64,
        "n_encoder_layers": 2,
        "n_decoder_layers": 2,
        "dropout": 0.0,
    }
    values.update(overrides)
    return ModelConfig(**values)  # type: ignore[arg-type]


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 60, (3, 7), generator=g)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    src[1, 4:] = 0
    tgt = torch.randint(4, 60, (3, 6), generator=g)
    return src, mask, tgt


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_position": "pre"},
        {"activation": "swish", "sinusoid_layout": "concat", "final_logits_bias": True},
        {"activation": "gelu", "share_embeddings": False, "tgt_vocab_size": 70},
    ],
)
def test_incremental_decoding_matches_full_prefix(overrides: dict[str, object]) -> None:
    torch.manual_seed(0)
    model = Transformer(tiny_config(**overrides)).eval()
    if model.logits_bias is not None:
        torch.nn.init.normal_(model.logits_bias)
    src, mask, tgt = batch()
    with torch.no_grad():
        full = model(src, mask, tgt)
        cross = model.cross_kv(model.encode(src, mask))
        cache = None
        steps = []
        for t in range(tgt.shape[1]):
            logits, cache = model.decode_step(tgt[:, t : t + 1], cross, mask, cache)
            steps.append(logits)
        # two tokens at once after a cached prefix must agree too
        _, prefix_cache = model.decode_step(tgt[:, :3], cross, mask, None)
        chunk, _ = model.decode_step(tgt[:, 3:5], cross, mask, prefix_cache)
    assert torch.allclose(full, torch.cat(steps, dim=1), atol=1e-5)
    assert torch.allclose(full[:, 3:5], chunk, atol=1e-5)
    assert cache is not None and cache[0][0].shape == (3, 4, 6, 8)


def test_padding_does_not_change_other_positions() -> None:
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src, mask, tgt = batch()
    with torch.no_grad():
        padded = model(src[1:2], mask[1:2], tgt[1:2])
        trimmed = model(src[1:2, :4], mask[1:2, :4], tgt[1:2])
    assert torch.allclose(padded, trimmed, atol=1e-5)


def test_embeddings_are_shared_with_output_projection() -> None:
    model = Transformer(tiny_config())
    assert model.generator.weight is model.src_embed.weight is model.tgt_embed.weight
    separate = Transformer(tiny_config(share_embeddings=False, tgt_vocab_size=70))
    assert separate.src_embed.weight is not separate.tgt_embed.weight
    assert separate.generator.weight is separate.tgt_embed.weight


def test_sinusoid_layouts() -> None:
    inter = sinusoid_table(10, 8, "interleaved")
    concat = sinusoid_table(10, 8, "concat")
    assert torch.allclose(inter[:, 0::2], concat[:, :4]) and torch.allclose(inter[:, 1::2], concat[:, 4:])
    assert inter[0, 1] == 1.0 and inter[0, 0] == 0.0  # cos(0), sin(0)


def test_config_validation_and_round_trip() -> None:
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(n_heads=5)
    with pytest.raises(ValueError, match="activation"):
        tiny_config(activation="tanh")
    with pytest.raises(ValueError, match="share_embeddings"):
        tiny_config(tgt_vocab_size=70)
    config = tiny_config(languages=("de", "en"))
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown ModelConfig keys"):
        ModelConfig.from_dict({**config.to_dict(), "bogus": 1})


def big_checkpoint(tmp_path: Path) -> bytes:
    """A checkpoint of 14 MB (the shipped model's size)."""
    model = Transformer(tiny_config(d_model=256, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3))
    save_checkpoint(tmp_path / "big.pt", model, b"spm", dtype=torch.float16)
    return (tmp_path / "big.pt").read_bytes()


def test_checkpoint_round_trip_fp16(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, b"spm-bytes", meta={"steps": 3}, dtype=torch.float16)
    loaded = load_checkpoint(path)
    assert loaded.config == model.config and loaded.meta == {"steps": 3} and loaded.tokenizer_model == b"spm-bytes"
    assert loaded.model.generator.weight is loaded.model.src_embed.weight
    src, mask, tgt = batch()
    with torch.no_grad():
        assert torch.allclose(model(src, mask, tgt), loaded.model(src, mask, tgt), atol=2e-2)
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="is not a transduce checkpoint, or is damaged"):
        load_checkpoint(tmp_path / "bad.pt")
    import pickle

    (tmp_path / "pickled.pt").write_bytes(pickle.dumps({"steps": {1, 2}}, protocol=4))  # weights_only refuses a set
    with pytest.raises(ValueError) as refused:
        load_checkpoint(tmp_path / "pickled.pt")
    assert "\n" not in str(refused.value) and "weights_only" not in str(refused.value)  # (torch's 7 lines advised
    assert str(refused.value).endswith("(UnpicklingError: it holds objects a checkpoint never has)")  # unsafe loading)
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(
        ValueError, match=r"\(EOFError: it is empty, cut short or not a torch file\)$"
    ):  # ("EOFError: ")
        load_checkpoint(tmp_path / "empty.pt")
    with pytest.raises(ValueError, match="is a directory: name the checkpoint file"):
        load_checkpoint(tmp_path)
    # copies that did not finish: torch said "[Errno 22] Invalid argument" of a small one, and of a large one an
    # "internal miniz error" with advice, cut off at 300 characters
    for whole in (path.read_bytes(), big_checkpoint(tmp_path)):
        (tmp_path / "cut.pt").write_bytes(whole[: len(whole) // 2])
        with pytest.raises(ValueError) as cut:
            load_checkpoint(tmp_path / "cut.pt")
        assert str(cut.value) == (
            f"{tmp_path / 'cut.pt'} is not a transduce checkpoint, or is damaged (its zip archive is cut short or "
            "damaged, as a copy or save that did not finish leaves it; copy it again)"
        )
    flipped = bytearray(path.read_bytes())  # a byte of a weight flipped: torch.load never checks, it loaded
    flipped[flipped.index(b"data/0") + 300] ^= 0xFF
    others = {
        "flipped.pt": (bytes(flipped), "data/0 inside it fails its checksum: the file is damaged; copy it again"),
        "zeros.pt": (bytes(4096), "it holds only zero bytes"),  # (was "it holds objects a checkpoint never has")
        "pointer.pt": (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "fetch it with `git lfs pull`"),
    }
    for name, (data, why) in others.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=re.escape(why)):
            load_checkpoint(tmp_path / name)


def test_beams_share_their_sentences_cross_attention() -> None:
    """Rows R = N * k over N sentences' cross K/V equal the same rows over cross K/V repeated per row."""
    torch.manual_seed(0)
    model = Transformer(tiny_config()).eval()
    src, mask, tgt = batch()
    k = 3
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src, mask))  # per layer (N, h, S, d_k)
        repeated = [(kk.repeat_interleave(k, 0), v.repeat_interleave(k, 0)) for kk, v in cross]
        rows = tgt.repeat_interleave(k, 0)
        rows[1::k] = torch.flip(rows[1::k], [1])  # the beams of a sentence differ
        shared_cache = full_cache = None
        for t in range(rows.shape[1]):
            shared, shared_cache = model.decode_step(rows[:, t : t + 1], cross, mask, shared_cache)
            full, full_cache = model.decode_step(rows[:, t : t + 1], repeated, mask.repeat_interleave(k, 0), full_cache)
            assert shared.shape == (9, 1, 60)
            assert torch.allclose(shared, full, atol=1e-5)


@pytest.mark.parametrize("overrides", [{}, {"norm_position": "pre"}])
def test_rows_with_shorter_histories_join_a_longer_cache(overrides: dict[str, object]) -> None:
    """A row left-padded to the batch's cache length, masked, at its own position, decodes as it would alone."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(**overrides)).eval()
    src, mask, tgt = batch()
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src, mask))
        alone = []  # sentence i alone: i + 1 tokens already decoded, then one more
        for i in range(3):
            one = [(k[i : i + 1], v[i : i + 1]) for k, v in cross]
            _, cache = model.decode_step(tgt[i : i + 1, : i + 1], one, mask[i : i + 1])
            logits, _ = model.decode_step(tgt[i : i + 1, i + 1 : i + 2], one, mask[i : i + 1], cache)
            alone.append((cache, logits[:, -1]))
        P = 3  # the longest history; shorter ones are padded at the start with garbage that the mask hides
        padded = []
        for layer in range(2):
            keys, values = [], []
            for i, (cache, _) in enumerate(alone):
                junk = torch.randn(1, 4, P - (i + 1), 8)
                keys.append(torch.cat([junk, cache[layer][0]], dim=2))
                values.append(torch.cat([junk * 3, cache[layer][1]], dim=2))
            padded.append((torch.cat(keys), torch.cat(values)))
        self_mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)  # (R, P + 1)
        logits, new_cache = model.decode_step(
            tgt[:, 1:4].gather(1, torch.tensor([[0], [1], [2]])),  # the token after each row's history
            cross,
            mask,
            padded,
            positions=torch.tensor([1, 2, 3]),
            self_mask=self_mask,
        )
    for i, (_, expected) in enumerate(alone):
        torch.testing.assert_close(logits[i, -1], expected[0], atol=1e-5, rtol=1e-5)
    assert new_cache[0][0].shape == (3, 4, P + 1, 8)
