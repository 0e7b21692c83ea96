"""int8 dynamic quantisation of an exported model directory (onnxruntime.quantization), for CPU serving."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from transduce.engine import io_names as names
from transduce.engine.manifest import sha256_file
from transduce.export.embedding import tied_initializers
from transduce.export.files import ONNX_EXPORT, replacing_dir, store_weights_apart, with_weights


def quantize_model_dir(
    src: str | Path, dst: str | Path, *, extra: dict[str, Any] | None = None, inputs: Iterable[Path | None] = ()
) -> dict[str, Any]:
    """Copy ``src`` to ``dst`` with encoder/decoder MatMul weights quantised to int8 (activations stay float).

    int8 runs on the CPU: the decoder quantised is the export's CPU decoder (fused self-attention) when it has one,
    written as the int8 export's only full-vocabulary decoder; a shortlist decoder is quantised and kept, and takes
    its candidates' projection rows as int8 too (``int8_projection``). Weights are quantised to 7 bits on an x86 CPU
    without VNNI (``row_peak``: its int8 kernels saturate on full-range weights; onnxruntime's ``reduce_range``) or
    when ``TRANSDUCE_INT8_WEIGHT_BITS`` is 7; the manifest's ``int8_weight_bits`` says which.

    Written beside ``dst`` and moved into place at the end: a failure leaves an existing ``dst`` as it was.
    ``extra`` entries are added to the manifest."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = Path(src), Path(dst)
    dtype = json.loads((src / names.MANIFEST_FILE).read_text()).get("dtype", "float32")
    if dtype != "float32":
        raise ValueError(f"{src} is a {dtype} export; int8 quantisation starts from a float32 export")
    seven = seven_bits()
    with replacing_dir(dst, marker=ONNX_EXPORT, inputs=(src, *inputs)) as work:
        shutil.copytree(src, work, dirs_exist_ok=True)
        manifest = json.loads((work / names.MANIFEST_FILE).read_text())
        cpu_decoder = manifest.pop("cpu_decoder", None)
        if isinstance(cpu_decoder, str):
            for file in (cpu_decoder, names.weights_file(cpu_decoder)):
                (work / file).unlink(missing_ok=True)
                manifest.get("checksums", {}).pop(file, None)
        sources = {names.ENCODER_FILE: src / names.ENCODER_FILE}
        sources[names.DECODER_FILE] = src / (cpu_decoder if isinstance(cpu_decoder, str) else names.DECODER_FILE)
        # the shortlist decoder too: with it int8 is as fast as without and translates as well as float32 does
        # (README, lever table: BLEU within 0.15 of float32 with the shortlist, up to 1.1 below it without)
        if isinstance(shortlist_decoder := manifest.get("shortlist_decoder"), str):
            sources[shortlist_decoder] = src / shortlist_decoder
        for graph, source in sources.items():
            with _quiet_root_log():  # (onnxruntime's "Quantization parameters ... not specified": a line a tensor)
                quantize_dynamic(
                    source,
                    work / graph,
                    weight_type=QuantType.QInt8,
                    reduce_range=seven,
                    op_types_to_quantize=["MatMul"],  # with a weight: attention's MatMuls of two activations stay
                    extra_options={"DefaultTensorType": TensorProto.FLOAT},  # outputs of onnxruntime's own operators
                )
            if graph == shortlist_decoder:
                int8_projection(work / graph)
            store_weights_apart(work / graph)  # replaces the float32 weights file copied from src
        if isinstance(entry := manifest.pop("embedding", None), dict):  # the graphs as quantised: which still gather
            tied = tied_initializers(work, np.load(work / names.EMBEDDING_FILE), sources)  # from the copied table
            if tied:
                manifest["embedding"] = {**entry, "initializers": tied}
            else:
                (work / names.EMBEDDING_FILE).unlink()
                manifest.get("checksums", {}).pop(names.EMBEDDING_FILE, None)
        manifest["dtype"] = "int8-dynamic"
        manifest["int8_weight_bits"] = 7 if seven else 8
        manifest["model_name"] = manifest["model_name"] + "-int8"
        # the weights files as written now (a graph of an export before revision 6 gets one here)
        listed = [f for f in manifest.get("checksums", {}) if not f.endswith(names.WEIGHTS_SUFFIX)]
        manifest["checksums"] = {f: sha256_file(work / f) for f in with_weights(work, listed)}
        manifest.pop("verification", None)  # int8 is not expected to match fp32 within 1e-4
        manifest.update(extra or {})
        (work / names.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


INT8_BITS_ENV = "TRANSDUCE_INT8_WEIGHT_BITS"  # 7 or 8: the int8 weights' bits whatever this CPU (the Docker build)


def seven_bits() -> bool:
    """Whether to quantise weights to 7 bits: ``TRANSDUCE_INT8_WEIGHT_BITS`` when set (an image built on one machine
    runs on others), else this CPU's need (``row_peak``)."""
    from transduce.engine.shortlist import row_peak

    bits = os.environ.get(INT8_BITS_ENV, "").strip()
    if bits not in ("", "7", "8"):
        raise ValueError(f"{INT8_BITS_ENV} must be 7 or 8 (unset: what this CPU needs), got {bits!r}")
    return bits == "7" if bits else row_peak() < 127


def int8_projection(graph_path: Path) -> None:
    """Make a quantised shortlist decoder take its candidates' projection rows as int8: the float32 input
    ``vocab_projection`` (C, d_model), transposed and multiplied, becomes ``vocab_projection_int8`` (d_model, C) and
    ``vocab_projection_scale`` (C,) into one ``com.microsoft.DynamicQuantizeMatMul`` (the activations quantised per
    step, as every other MatMul of the graph). The engine quantises the rows once per model, one scale per row
    (``transduce.engine.shortlist.quantize_rows``). At 32 rows of 2,300 candidates the projection took 74 instead of
    300 us on one thread (README, lever table)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(graph_path))
    graph = model.graph
    transpose = next(
        (n for n in graph.node if n.op_type == "Transpose" and n.input[0] == names.DEC_VOCAB_PROJECTION), None
    )
    matmul = transpose and next(
        (n for n in graph.node if n.op_type == "MatMul" and n.input[1] == transpose.output[0]), None
    )
    if transpose is None or matmul is None:
        raise ValueError(
            f"{graph_path} has no Transpose + MatMul of {names.DEC_VOCAB_PROJECTION}: not a shortlist decoder"
        )
    fused = helper.make_node(
        "DynamicQuantizeMatMul",
        [matmul.input[0], names.DEC_VOCAB_PROJECTION_INT8, names.DEC_VOCAB_PROJECTION_SCALE],
        list(matmul.output),
        name=f"{matmul.name}_int8",
        domain="com.microsoft",
    )
    graph.node.insert(list(graph.node).index(matmul), fused)
    graph.node.remove(matmul)
    graph.node.remove(transpose)
    for info in [v for v in graph.value_info if v.name == transpose.output[0]]:
        graph.value_info.remove(info)
    rows = next(i for i in graph.input if i.name == names.DEC_VOCAB_PROJECTION)
    candidates, d_model = (d.dim_param or d.dim_value or None for d in rows.type.tensor_type.shape.dim)
    graph.input.remove(rows)
    graph.input.append(
        helper.make_tensor_value_info(names.DEC_VOCAB_PROJECTION_INT8, TensorProto.INT8, [d_model, candidates])
    )
    graph.input.append(helper.make_tensor_value_info(names.DEC_VOCAB_PROJECTION_SCALE, TensorProto.FLOAT, [candidates]))
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.checker.check_model(model)
    onnx.save(model, str(graph_path))


@contextlib.contextmanager
def _quiet_root_log() -> Iterator[None]:
    """onnxruntime's quantiser logs an INFO line per tensor on the root logger, which the command line shows."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)
