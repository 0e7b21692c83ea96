"""The shortlist decoder graph: a decoder graph (the CPU decoder, decoder_cpu.onnx, when the export has one) with its
output projection taken as an input, (C, d_model) rows of the candidates a batch may produce, instead of the
(d_model, V) weight, and a (R, C) mask of each row's own candidates applied before the log-softmax; see
``transduce.engine.shortlist``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from transduce.engine import io_names as names
from transduce.export.files import save_graph


def shortlist_decoder(decoder: Path, out: Path, vocab: int) -> np.ndarray:
    """Write the shortlist variant of ``decoder`` to ``out`` (its weights beside it, ``save_graph``); returns the
    projection rows (V, d_model) it no longer holds. The projection is the last MatMul whose second input is a
    (d_model, ``vocab``) weight; the graph's one LogSoftmax then normalises over the candidates its row's mask keeps
    (the others get a log-probability of -inf)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(decoder))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    matmuls = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    proj = [n for n in matmuls if list(inits[n.input[1]].dims)[-1:] == [vocab]]
    if not proj:
        raise ValueError(
            f"{decoder} has no output projection MatMul onto {vocab} pieces: cannot make a shortlist graph"
        )
    node = proj[-1]
    weight_name = node.input[1]
    weight = numpy_helper.to_array(inits[weight_name])  # (d_model, V)
    if any(weight_name in n.input for n in graph.node if n is not node):
        raise ValueError(f"{decoder}: the output projection weight is shared with other nodes")
    for consumer in (n for n in graph.node if node.output[0] in n.input):
        sized = [i for i in consumer.input if i in inits and vocab in list(inits[i].dims)]
        if sized:  # e.g. Marian's final logits bias: one value per vocabulary piece after the projection
            raise ValueError(
                f"{decoder}: the output projection is followed by {consumer.op_type} with a vocabulary-sized "
                f"{sized[0]} (a final logits bias): a shortlist needs a model without one; export with --no-shortlist"
            )
    softmaxes = [n for n in graph.node if n.op_type == "LogSoftmax"]
    if len(softmaxes) != 1:
        raise ValueError(f"{decoder} has {len(softmaxes)} LogSoftmax nodes, not one: cannot make a shortlist graph")
    _mask_before(graph, softmaxes[0])
    transposed = f"{names.DEC_VOCAB_PROJECTION}.T"
    graph.node.insert(
        list(graph.node).index(node),
        helper.make_node("Transpose", [names.DEC_VOCAB_PROJECTION], [transposed], perm=[1, 0]),
    )
    node.input[1] = transposed
    graph.initializer.remove(inits[weight_name])
    elem = _elem_type(weight)
    graph.input.append(
        helper.make_tensor_value_info(names.DEC_VOCAB_PROJECTION, elem, [names.CANDIDATE_AXIS, weight.shape[0]])
    )
    for output in graph.output:
        if output.name == names.DEC_LOG_PROBS and len(output.type.tensor_type.shape.dim) == 2:
            dim = output.type.tensor_type.shape.dim[1]
            dim.ClearField("dim_value")
            dim.dim_param = names.CANDIDATE_AXIS
    onnx.checker.check_model(model)
    save_graph(model, out)  # its weights in a file beside it, as every graph of an export
    return np.ascontiguousarray(weight.T)


def _mask_before(graph: Any, softmax: Any) -> None:
    """Give the LogSoftmax's input -inf wherever the (R, C) bool input ``vocab_mask`` is false (the mask is reshaped
    to the logits' shape, e.g. (R, 1, C)): those candidates get a log-probability of -inf, as padding does in the
    search, and every row keeps at least eos, so no row is all -inf."""
    from onnx import TensorProto, helper

    logits, prefix = softmax.input[0], names.DEC_VOCAB_MASK
    nodes = [
        helper.make_node("Shape", [logits], [f"{prefix}.shape"]),
        helper.make_node("Reshape", [names.DEC_VOCAB_MASK, f"{prefix}.shape"], [f"{prefix}.reshaped"]),
        helper.make_node(
            "Constant",
            [],
            [f"{prefix}.off"],
            value=helper.make_tensor(f"{prefix}.off", TensorProto.FLOAT, [], [-np.inf]),
        ),
        helper.make_node("Where", [f"{prefix}.reshaped", logits, f"{prefix}.off"], [f"{prefix}.logits"]),
    ]
    at = list(graph.node).index(softmax)
    for i, node in enumerate(nodes):
        graph.node.insert(at + i, node)
    softmax.input[0] = f"{prefix}.logits"
    graph.input.append(
        helper.make_tensor_value_info(names.DEC_VOCAB_MASK, TensorProto.BOOL, ["batch_size", names.CANDIDATE_AXIS])
    )


def _elem_type(weight: np.ndarray) -> int:
    """The ONNX element type of a float32/float16 weight."""
    from onnx import TensorProto

    return {np.dtype("float32"): TensorProto.FLOAT, np.dtype("float16"): TensorProto.FLOAT16}[weight.dtype]
