"""Export verification: onnx.checker, then PyTorch vs. onnxruntime log-probs and greedy outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch

from transduce.engine import io_names as names
from transduce.engine.embedding import Embedding, open_given
from transduce.engine.session import session_options
from transduce.export.graphs import dummy_inputs
from transduce.model.transformer import Transformer
from transduce.tokenizer import Tokenizer

SAMPLE_SENTENCES = (
    "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "In the beginning God created the heaven and the earth.",
    "Guten Morgen, wie geht es dir?",
    "Click here to open the file.",
)


class VerificationError(RuntimeError):
    """The exported graphs do not reproduce the PyTorch model."""


def _pad(seqs: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    S = max(len(s) for s in seqs)
    ids = np.full((len(seqs), S), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), S), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = s, 1
    return ids, mask


def _cache_dtype(dec: ort.InferenceSession) -> type[np.floating]:
    """The numpy dtype of a decoder graph's caches (float16 for a float16 export)."""
    cache_type = {i.name: i.type for i in dec.get_inputs()}[names.past_self(0, "key")]
    return np.float16 if cache_type == "tensor(float16)" else np.float32


def _compare(
    model: Transformer, enc: ort.InferenceSession, dec: ort.InferenceSession, seqs: list[list[int]], steps: int
) -> tuple[float, bool]:
    """Greedy-decode ``steps`` tokens with both runtimes; returns max |delta log-prob| and whether tokens agree."""
    cfg = model.config
    L = cfg.n_decoder_layers
    ids, mask = _pad(seqs, cfg.pad_id)
    cross_ort = enc.run(names.cross_names(L), {names.ENC_INPUT_IDS: ids, names.ENC_ATTENTION_MASK: mask})
    dtype = _cache_dtype(dec)
    past_ort = [np.zeros((len(seqs), cfg.n_heads, 0, cfg.d_k), dtype)] * (2 * L)
    with torch.no_grad():
        src, src_mask = torch.from_numpy(ids), torch.from_numpy(mask).bool()
        cross_pt = model.cross_kv(model.encode(src, src_mask))
        cache_pt = None
        tok_pt = tok_ort = np.full(len(seqs), cfg.decoder_start_id, dtype=np.int64)
        max_diff, same = 0.0, True
        for step in range(steps):
            logits, cache_pt = model.decode_step(torch.from_numpy(tok_pt)[:, None], cross_pt, src_mask, cache_pt)
            lp_pt = torch.log_softmax(logits[:, -1], dim=-1).numpy()
            feed = {
                names.DEC_INPUT_IDS: tok_ort[:, None],
                names.DEC_ENCODER_MASK: mask,
                names.DEC_POSITIONS: np.full(len(seqs), step, dtype=np.int64),
                names.DEC_SELF_MASK: np.ones((len(seqs), step + 1), dtype=np.int64),
                **dict(zip(names.past_names(L), past_ort, strict=True)),
                **dict(zip(names.cross_names(L), cross_ort, strict=True)),
            }
            lp_ort, *past_ort = dec.run([names.DEC_LOG_PROBS, *names.present_names(L)], feed)
            max_diff = max(max_diff, float(np.abs(lp_pt - lp_ort).max()))
            tok_pt, tok_ort = lp_pt.argmax(-1), lp_ort.argmax(-1)
            same = same and bool((tok_pt == tok_ort).all())
            tok_ort = tok_pt  # keep both runtimes on the same prefix so later steps stay comparable
    return max_diff, same


def _compare_beams(model: Transformer, dec: ort.InferenceSession, seed: int) -> tuple[float, bool]:
    """One step as the engine feeds it mid-decode: 2 sentences of 2 hypotheses sharing their sentence's cross K/V, rows
    at different positions with cache padding at the start, random caches; returns max |delta| over the log-probs and
    the extended caches against ``Transformer.decode_step``, and whether every row's best token agrees."""
    L = model.config.n_decoder_layers
    tensors = list(dummy_inputs(model)["decoder"])  # ids, encoder mask, positions, self mask, past..., cross...
    generator = torch.Generator().manual_seed(seed)
    for j in range(4, len(tensors)):
        tensors[j] = torch.randn(tuple(tensors[j].shape), generator=generator)
    ids, src_mask, positions, self_mask = tensors[:4]
    past, cross = tensors[4 : 4 + 2 * L], tensors[4 + 2 * L :]
    with torch.no_grad():
        logits, cache = model.decode_step(
            ids,
            [(cross[2 * i], cross[2 * i + 1]) for i in range(L)],
            src_mask.bool(),
            [(past[2 * i], past[2 * i + 1]) for i in range(L)],
            positions=positions,
            self_mask=self_mask,
        )
        expected = [torch.log_softmax(logits[:, -1].float(), dim=-1), *(t for kv in cache for t in kv)]
    dtype = _cache_dtype(dec)
    feed = {
        n: t.numpy().astype(dtype) if t.is_floating_point() else t.numpy()
        for n, t in zip(names.decoder_input_names(L), tensors, strict=True)
    }
    got = dec.run([names.DEC_LOG_PROBS, *names.present_names(L)], feed)
    diff = max(float(np.abs(a.astype(np.float32) - b.numpy()).max()) for a, b in zip(got, expected, strict=True))
    return diff, bool((got[0].argmax(-1) == expected[0].numpy().argmax(-1)).all())


def verify_export(
    model: Transformer,
    tokenizer: Tokenizer,
    model_dir: Path,
    *,
    tolerance: float = 1e-4,
    steps: int = 12,
    seed: int = 0,
    require_identical: bool = True,
    embedding: Embedding | None = None,
) -> dict[str, Any]:
    """Check the graphs, then parity of each decoder graph (the traced one and the CPU one) on random and real
    sentences at batch 1 and with padding, and on one step with beams and padded caches; raises on failure
    (log-probs further apart than ``tolerance``, or greedy tokens that differ unless ``require_identical`` is off).
    ``embedding``: the export's one embedding table, given to the graphs that gather from it as the engine does."""
    decoders = [f for f in (names.DECODER_FILE, names.CPU_DECODER_FILE) if (model_dir / f).is_file()]
    for graph in (names.ENCODER_FILE, *decoders):
        onnx.checker.check_model(str(model_dir / graph))
    cpu = ["CPUExecutionProvider"]
    # options of each session's own (given initializers are added to them), on the process's shared thread pool if
    # an engine made one (they must be)
    enc = open_given(model_dir / names.ENCODER_FILE, session_options(0, 1), cpu, embedding)
    cfg = model.config
    rng = np.random.default_rng(seed)
    random_seqs = [rng.integers(4, cfg.src_vocab_size, size=n).tolist() + [cfg.eos_id] for n in (9, 3, 14, 1)]
    langs: list[str | None] = list(cfg.languages) or [None]
    real_seqs = [tokenizer.encode_source(s, langs[i % len(langs)]) for i, s in enumerate(SAMPLE_SENTENCES)]
    report: dict[str, Any] = {"tolerance": tolerance, "steps": steps, "cases": []}
    for graph in decoders:
        dec = open_given(model_dir / graph, session_options(0, 1), cpu, embedding)
        suffix = "" if graph == names.DECODER_FILE else f", {graph}"  # the traced graph's cases keep their names
        results = [
            (f"{label}{suffix}", _compare(model, enc, dec, seqs, steps))
            for label, seqs in (
                ("random batch 1", random_seqs[:1]),
                ("random batch 4 (padded)", random_seqs),
                ("real batch 1", real_seqs[:1]),
                ("real batch 5 (padded)", real_seqs),
            )
        ]
        results.append((f"beams sharing cross K/V, padded caches{suffix}", _compare_beams(model, dec, seed)))
        for case, (diff, same) in results:
            report["cases"].append({"case": case, "max_abs_diff_log_probs": diff, "greedy_identical": same})
    report["max_abs_diff"] = max(c["max_abs_diff_log_probs"] for c in report["cases"])
    report["greedy_identical"] = all(c["greedy_identical"] for c in report["cases"])
    if report["max_abs_diff"] > tolerance or (require_identical and not report["greedy_identical"]):
        raise VerificationError(f"ONNX export does not match PyTorch: {report['cases']}")
    return report
