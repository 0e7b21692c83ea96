"""The shortlist decoder graph: decoder.onnx with its output projection taken as an input, (C, d_model) rows of the
candidates a batch may produce, instead of the (d_model, V) weight; see ``transduce.engine.shortlist``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from transduce.engine import io_names as names


def shortlist_decoder(decoder: Path, out: Path, vocab: int) -> np.ndarray:
    """Write the shortlist variant of ``decoder`` to ``out``; returns the projection rows (V, d_model) it no longer
    holds. The projection is the last MatMul whose second input is a (d_model, ``vocab``) weight."""
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
    onnx.save(model, str(out))
    return np.ascontiguousarray(weight.T)


def _elem_type(weight: np.ndarray) -> int:
    """The ONNX element type of a float32/float16 weight."""
    from onnx import TensorProto

    return {np.dtype("float32"): TensorProto.FLOAT, np.dtype("float16"): TensorProto.FLOAT16}[weight.dtype]
