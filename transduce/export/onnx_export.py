"""Checkpoint -> ONNX model directory: encoder.onnx, decoder.onnx (traced; CUDA), decoder_cpu.onnx (float32: fused
self-attention, for the CPU), gather.onnx, tokenizer.model, manifest.json, and with a shortlist its table and graph."""

from __future__ import annotations

import copy
import itertools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from transduce.engine import io_names as names
from transduce.engine.manifest import EXPORT_REVISION, FORMAT, FORMAT_VERSION, sha256_file
from transduce.export.embedding import add_embedding, tied_initializers
from transduce.export.files import ONNX_EXPORT, replacing_dir, save_graph, store_weights_apart, with_weights
from transduce.export.fused_decoder import fused_decoder_step
from transduce.export.graphs import DecoderStepGraph, EncoderGraph, dummy_inputs, gather_graph
from transduce.model.checkpoint import Checkpoint, load_checkpoint
from transduce.model.transformer import Transformer

EXPORT_DTYPES = ("float32", "float16")


MIN_OPSET, MAX_OPSET = 14, 21  # exported and verified with 14, 17 (the default), 20 and 21 (2026-11-26)


@dataclass(frozen=True)
class ExportConfig:
    """Options of ``transduce export``."""

    opset: int = 17
    verify: bool = True
    tolerance: float | None = None  # max |delta log-prob| vs. PyTorch fp32 (None: 1e-4 for float32, 0.1 for float16)
    model_name: str | None = None  # defaults to the checkpoint's meta "name" or its file stem
    dtype: str = "float32"  # float16 halves the weights and caches, for GPUs (CPU kernels mostly lack it: slow)
    shortlist: Path | None = None  # a `transduce shortlist` table: adds the shortlist decoder (CPU) to the export

    def __post_init__(self) -> None:
        if self.dtype not in EXPORT_DTYPES:
            raise ValueError(
                f"dtype must be one of {', '.join(EXPORT_DTYPES)}, got {self.dtype!r} "
                "(int8: quantize a float32 export with export.quantize)"
            )
        if not MIN_OPSET <= self.opset <= MAX_OPSET:
            raise ValueError(
                f"opset must be {MIN_OPSET} to {MAX_OPSET} (those this export is verified with), got {self.opset}"
            )
        if self.tolerance is not None and not self.tolerance > 0:
            raise ValueError(f"tolerance must be > 0, got {self.tolerance}")

    @property
    def max_diff(self) -> float:
        """The verification tolerance in effect."""
        if self.tolerance is not None:
            return self.tolerance
        return 1e-4 if self.dtype == "float32" else 0.1


def language_pairs(ckpt: Checkpoint) -> list[list[str]]:
    """Translation directions: the checkpoint's meta "pairs", else every ordered pair of its languages (tagged);
    ValueError when there are none, or a pair names a language the model does not have (the export succeeded and
    no engine could load it)."""
    langs = ckpt.config.languages
    if "pairs" in ckpt.meta:
        pairs = ckpt.meta["pairs"]
        if not isinstance(pairs, list | tuple) or not all(
            isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(x, str) and x for x in p) for p in pairs
        ):
            raise ValueError(f"the checkpoint's meta 'pairs' must be [source, target] code pairs, got {pairs!r}")
        unknown = sorted({code for pair in pairs for code in pair} - set(langs))
        if not pairs or unknown:
            problem = f"names {unknown}, not among its languages {list(langs)}" if unknown else "is empty"
            raise ValueError(f"the checkpoint's meta 'pairs' {problem}: fix the checkpoint's meta or its languages")
        return [list(p) for p in pairs]
    if len(langs) < 2:
        raise ValueError(
            f"the checkpoint has {len(langs)} language(s) {list(langs)} and no meta 'pairs': nothing to translate"
        )
    if not ckpt.config.target_tag:
        if len(langs) != 2:
            raise ValueError("a model without target-language tags needs meta['pairs'] naming its one direction")
        return [list(langs)]
    return [[a, b] for a, b in itertools.permutations(langs, 2)]


def _export_graph(
    module: torch.nn.Module,
    args: tuple[torch.Tensor, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    opset: int,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape arithmetic are expected and checked by verify
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=True,
        )


def export_graphs(model: Transformer, out_dir: Path, opset: int, dtype: str = "float32") -> dict[str, Any]:
    """Write encoder.onnx, decoder.onnx and gather.onnx (weights and caches in ``dtype``), and for float32 the CPU
    decoder (``transduce.export.fused_decoder``); returns the graphs' I/O names (the CPU decoder has the decoder's)."""
    if dtype == "float16":
        model = copy.deepcopy(model).half()
    L = model.config.n_decoder_layers
    example = dummy_inputs(model)
    kv_axes = {0: names.BATCH_AXIS, 2: names.SRC_AXIS}
    enc_in = [names.ENC_INPUT_IDS, names.ENC_ATTENTION_MASK]
    enc_out = [names.ENC_HIDDEN, *names.cross_names(L)]
    enc_axes = {n: {0: names.BATCH_AXIS, 1: names.SRC_AXIS} for n in [*enc_in, names.ENC_HIDDEN]}
    enc_axes.update(dict.fromkeys(names.cross_names(L), kv_axes))
    _export_graph(
        EncoderGraph(model).eval(), example["encoder"], out_dir / names.ENCODER_FILE, enc_in, enc_out, enc_axes, opset
    )

    dec_in = names.decoder_input_names(L)
    dec_out = [names.DEC_LOG_PROBS, *names.present_names(L)]
    dec_axes: dict[str, dict[int, str]] = {
        names.DEC_INPUT_IDS: {0: names.BATCH_AXIS},  # one new token per row (no causal mask in the graph)
        names.DEC_ENCODER_MASK: {0: names.SENTENCE_AXIS, 1: names.SRC_AXIS},
        names.DEC_POSITIONS: {0: names.BATCH_AXIS},
        names.DEC_SELF_MASK: {0: names.BATCH_AXIS, 1: names.TOTAL_AXIS},
        names.DEC_LOG_PROBS: {0: names.BATCH_AXIS},
    }
    dec_axes.update({n: {0: names.BATCH_AXIS, 2: names.PAST_AXIS} for n in names.past_names(L)})
    dec_axes.update({n: {0: names.BATCH_AXIS, 2: names.TOTAL_AXIS} for n in names.present_names(L)})
    dec_axes.update(dict.fromkeys(names.cross_names(L), {0: names.SENTENCE_AXIS, 2: names.SRC_AXIS}))
    _export_graph(
        DecoderStepGraph(model).eval(),
        example["decoder"],
        out_dir / names.DECODER_FILE,
        dec_in,
        dec_out,
        dec_axes,
        opset,
    )
    (out_dir / names.GATHER_FILE).write_bytes(gather_graph(2 * L, opset, dtype))
    for graph in (names.ENCODER_FILE, names.DECODER_FILE):  # as torch wrote them: weights inside
        store_weights_apart(out_dir / graph)
    if dtype == "float32":  # onnxruntime's CPU kernels are float32: a float16 export is for GPUs
        import onnx

        save_graph(onnx.load_model_from_string(fused_decoder_step(model, opset)), out_dir / names.CPU_DECODER_FILE)
    return {"encoder_inputs": enc_in, "encoder_outputs": enc_out, "decoder_inputs": dec_in, "decoder_outputs": dec_out}


def export_inputs(checkpoint: str | Path, config: ExportConfig, out_dir: Path) -> tuple[Path, Path | None]:
    """What an export reads and must not replace: the checkpoint and the table, unless the table is the one in
    ``out_dir`` itself, which is read before the swap and written into the new export."""
    table = config.shortlist
    rewritten = table is not None and table.resolve() == (out_dir / names.SHORTLIST_FILE).resolve()
    return Path(checkpoint), None if rewritten else table


def export_model(
    checkpoint: str | Path, out_dir: str | Path, config: ExportConfig | None = None, *, own_dir: bool = False
) -> dict[str, Any]:
    """Export a checkpoint to an ONNX model directory (written to a temp dir, verified, then moved into place).

    An existing ``out_dir`` is replaced only when it is an earlier export, or with ``own_dir`` (the project's own
    cache) whatever it holds; never when it holds the checkpoint (``export.files.check_target``)."""
    config = config or ExportConfig()
    checkpoint = Path(checkpoint)
    out_dir = Path(out_dir)
    ckpt = load_checkpoint(checkpoint)
    model = ckpt.model.float().eval()
    tokenizer = ckpt.tokenizer()
    cfg = ckpt.config
    marker = None if own_dir else ONNX_EXPORT
    with replacing_dir(out_dir, marker=marker, inputs=export_inputs(checkpoint, config, out_dir)) as tmp:
        io = export_graphs(model, tmp, config.opset, config.dtype)
        (tmp / names.TOKENIZER_FILE).write_bytes(ckpt.tokenizer_model)
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "export_revision": EXPORT_REVISION,
            "model_name": config.model_name or ckpt.meta.get("name") or checkpoint.stem,
            "model_config": cfg.to_dict(),
            "dims": {
                "d_model": cfg.d_model,
                "n_heads": cfg.n_heads,
                "d_k": cfg.d_k,
                "n_encoder_layers": cfg.n_encoder_layers,
                "n_decoder_layers": cfg.n_decoder_layers,
                "src_vocab_size": cfg.src_vocab_size,
                "tgt_vocab_size": cfg.tgt_vocab_size,
                "max_positions": cfg.max_positions,
            },
            "special_ids": {
                "pad": cfg.pad_id,
                "unk": cfg.unk_id,
                "bos": cfg.bos_id,
                "eos": cfg.eos_id,
                "decoder_start": cfg.decoder_start_id,
            },
            "languages": list(cfg.languages),
            "pairs": language_pairs(ckpt),
            "target_tag": cfg.target_tag,
            "tokenizer": names.TOKENIZER_FILE,
            "encoder": names.ENCODER_FILE,
            "decoder": names.DECODER_FILE,
            **({"cpu_decoder": names.CPU_DECODER_FILE} if (tmp / names.CPU_DECODER_FILE).is_file() else {}),
            "gather": names.GATHER_FILE,
            "io": io,
            "opset": config.opset,
            "dtype": config.dtype,
            "source_checkpoint": {"file": checkpoint.name, "sha256": sha256_file(checkpoint)},
            "meta": {k: v for k, v in ckpt.meta.items() if isinstance(v, str | int | float | bool)},
        }
        # the table the graphs gather from, once for all (export.embedding), before verification: the graphs are
        # verified as the engine runs them, given the table
        table = model.tgt_embed.weight.detach().numpy()
        graphs = [names.ENCODER_FILE, names.DECODER_FILE, names.CPU_DECODER_FILE]
        embedding = add_embedding(tmp, table, graphs) if config.dtype == "float32" else {}
        if config.verify:
            from transduce.engine.embedding import Embedding
            from transduce.export.verify import verify_export

            tied = embedding.get("embedding")
            given = Embedding.of(np.ascontiguousarray(table, np.float32), tied["initializers"]) if tied else None
            # always against the fp32 model; float16 may flip near-ties, so only its log-prob error is enforced
            manifest["verification"] = verify_export(
                model,
                tokenizer,
                tmp,
                tolerance=config.max_diff,
                require_identical=config.dtype == "float32",
                embedding=given,
            )
        files = [names.ENCODER_FILE, names.DECODER_FILE, names.GATHER_FILE, names.TOKENIZER_FILE]
        files += [names.CPU_DECODER_FILE] if "cpu_decoder" in manifest else []
        if config.shortlist is not None:
            manifest.update(add_shortlist(tmp, config.shortlist, cfg.tgt_vocab_size))
            files += [names.SHORTLIST_FILE, names.SHORTLIST_DECODER_FILE]
        if embedding and config.shortlist is not None:  # the shortlist decoder gathers from it too
            embedding["embedding"]["initializers"].update(
                tied_initializers(tmp, np.ascontiguousarray(table, np.float32), [names.SHORTLIST_DECODER_FILE])
            )
        manifest.update(embedding)
        files += [names.EMBEDDING_FILE] if embedding else []
        manifest["checksums"] = {f: sha256_file(tmp / f) for f in with_weights(tmp, files)}
        (tmp / names.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def add_shortlist(model_dir: Path, table_path: Path, vocab_size: int) -> dict[str, Any]:
    """Write the shortlist decoder graph and the table with the projection rows into an export; its manifest keys.

    The shortlist decoder runs on the CPU only: it is made from the CPU decoder when the export has one."""
    from transduce.engine.shortlist import load_table
    from transduce.export.shortlist_graph import shortlist_decoder

    table, _ = load_table(table_path)
    if table.vocab_size != vocab_size:
        raise ValueError(
            f"the shortlist {table_path} is for {table.vocab_size} pieces, the model has {vocab_size}: "
            "build it with `transduce shortlist` for this checkpoint"
        )
    base = model_dir / names.CPU_DECODER_FILE
    base = base if base.is_file() else model_dir / names.DECODER_FILE
    projection = shortlist_decoder(base, model_dir / names.SHORTLIST_DECODER_FILE, vocab_size)
    table.save(model_dir / names.SHORTLIST_FILE, projection)
    return {
        "shortlist": names.SHORTLIST_FILE,
        "shortlist_decoder": names.SHORTLIST_DECODER_FILE,
        "shortlist_source": {"file": table_path.name, "sha256": sha256_file(table_path)},
    }
