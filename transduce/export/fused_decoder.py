"""The CPU decoder step: a hand-written ONNX graph over onnxruntime's fused self-attention operator.

``com.microsoft.MultiHeadAttention`` does a whole self-attention step in one kernel: head split, appending the new
key/value to the cache (``past_key`` -> ``present_key``), scores, padding bias, softmax, weighted sum, head merge.
The torch exporter cannot emit it, so this module writes the graph from the weights, with the same inputs and outputs
as the traced ``DecoderStepGraph`` (``transduce.engine.io_names``): the engine, the shortlist graph and int8
quantisation use it unchanged, and export verification compares it with ``Transformer.decode_step``.

Per layer: one MatMul for the query, key and value projections of self-attention and one MultiHeadAttention node;
cross-attention with plain operators over the sentence's cached (N, h, S, d_k) keys/values, a sentence's k
hypotheses being one query sequence (beams share the sentence's keys/values), the 1/sqrt(d_k) scale folded into the
query projection; the feed-forward network. About 90 nodes run per step of the shipped 3-layer decoder instead of
147 in the traced graph after onnxruntime's own optimisations. onnxruntime's fused attention for cross-attention was
slower than plain operators with beams as the query sequence (README, lever table), so cross-attention keeps them.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from transduce.engine import io_names as names
from transduce.model.transformer import DecoderLayer, Transformer, sublayer

MS_DOMAIN = "com.microsoft"
ACTIVATION_OPS = {"relu": "Relu", "gelu": "Gelu"}  # swish: Mul(x, Sigmoid(x))


class _Graph:
    """Nodes and initializers of one graph being written, with fresh value names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def const(self, stem: str, value: np.ndarray | torch.Tensor) -> str:
        from onnx import numpy_helper

        array = value.detach().float().numpy() if isinstance(value, torch.Tensor) else value
        name = self.fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def ints(self, stem: str, *values: int) -> str:
        return self.const(stem, np.array(values, np.int64))

    def node(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1, **attrs: Any) -> list[str]:
        from onnx import helper

        domain = MS_DOMAIN if op_type in ("MultiHeadAttention", "Gelu") else ""  # opset 17 has no Gelu
        names_out = [self.fresh(op_type) for _ in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(
            helper.make_node(op_type, inputs, names_out, name=self.fresh(op_type), domain=domain, **attrs)
        )
        return names_out

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        return self.node(op_type, list(inputs), **attrs)[0]

    def linear(self, x: str, layer: nn.Linear, stem: str, scale: float = 1.0) -> str:
        """x @ W^T + b, the weight and bias multiplied by ``scale`` (a folded constant factor)."""
        y = self.op("MatMul", x, self.const(f"{stem}.weight", layer.weight.T * scale))
        return y if layer.bias is None else self.op("Add", y, self.const(f"{stem}.bias", layer.bias * scale))

    def layer_norm(self, x: str, norm: nn.Module, stem: str) -> str:
        norm = cast(nn.LayerNorm, norm)
        weight, bias = self.const(f"{stem}.weight", norm.weight), self.const(f"{stem}.bias", norm.bias)
        return self.op("LayerNormalization", x, weight, bias, axis=-1, epsilon=float(norm.eps))

    def activation(self, x: str, kind: str) -> str:
        if kind == "swish":  # x * sigmoid(x), as torch's silu
            return self.op("Mul", x, self.op("Sigmoid", x))
        return self.op(ACTIVATION_OPS[kind], x)  # Gelu: onnxruntime's erf form, as torch's default


def fused_decoder_step(model: Transformer, opset: int = 17) -> bytes:
    """The float32 decoder step graph of ``model`` (the traced graph's inputs and outputs) with fused self-attention.

    Made for onnxruntime's CPU provider (its MultiHeadAttention kernel takes a cache and an additive mask there).
    ``opset`` below 17 is raised to 17, the first with LayerNormalization: the graph is for this project's onnxruntime,
    while an older opset asked for the traced graphs still serves older runtimes."""
    from onnx import TensorProto, helper

    opset = max(opset, 17)

    m, cfg = model, model.config
    L, h, d, d_k = cfg.n_decoder_layers, cfg.n_heads, cfg.d_model, cfg.d_k
    pre = cfg.norm_position == "pre"
    scale = 1.0 / math.sqrt(d_k)
    g = _Graph()

    # target embeddings and each row's position: (R, 1) ids, (R,) positions -> (R, 1, d_model)
    # the table as the encoder and the shortlist's projection hold it, scaled after the gather: the engine gives every
    # graph the export's one copy (``transduce.export.embedding``; gathering then scaling gives the same floats)
    x = g.op("Gather", g.const("tgt_embed", m.tgt_embed.weight), names.DEC_INPUT_IDS)
    if m.embed_scale != 1.0:
        x = g.op("Mul", x, g.const("embed_scale", np.array(m.embed_scale, np.float32)))
    axis1 = g.ints("axis1", 1)
    positions = g.op("Gather", g.const("positions", cast(torch.Tensor, m.pe)), names.DEC_POSITIONS)  # (R, d_model)
    x = g.op("Add", x, g.op("Unsqueeze", positions, axis1))

    # additive masks, once for all layers: 0 where a row may attend, float32's lowest value where not
    zero = g.const("zero", np.array(0.0, np.float32))
    blocked = g.const("blocked", np.array(np.finfo(np.float32).min, np.float32))
    axes12 = g.ints("axes12", 1, 2)
    self_keep = g.op("Cast", names.DEC_SELF_MASK, to=TensorProto.BOOL)
    self_bias = g.op("Unsqueeze", g.op("Where", self_keep, zero, blocked), axes12)  # (R, 1, 1, P+1)
    cross_keep = g.op("Cast", names.DEC_ENCODER_MASK, to=TensorProto.BOOL)
    cross_bias = g.op("Unsqueeze", g.op("Where", cross_keep, zero, blocked), axes12)  # (N, 1, 1, S)
    sentences = g.op("Shape", names.DEC_ENCODER_MASK, start=0, end=1)  # [N]
    grouped = g.op("Concat", sentences, g.ints("k_h_dk", -1, h, d_k), axis=0)  # a sentence's k rows: (N, k, h, d_k)
    rows = g.ints("rows", -1, 1, d)  # back to one row per hypothesis: (R, 1, d_model)
    heads3 = g.ints("qkv_sizes", d, d, d)

    for i, module in enumerate(m.decoder_layers):
        layer = cast(DecoderLayer, module)
        s0, s1, s2 = (sublayer(layer, j) for j in range(3))
        # masked self-attention: the new position of each row over its cache, in one fused node
        a = g.layer_norm(x, s0.norm, f"l{i}.norm0") if pre else x
        sa = layer.self_attn
        w_qkv = torch.cat([sa.q_proj.weight, sa.k_proj.weight, sa.v_proj.weight]).T  # (d, 3d)
        b_qkv = torch.cat([sa.q_proj.bias, sa.k_proj.bias, sa.v_proj.bias])  # added inside the attention node
        q, k, v = g.node("Split", [g.op("MatMul", a, g.const(f"l{i}.self.qkv", w_qkv)), heads3], 3, axis=2)
        past = [names.past_self(i, "key"), names.past_self(i, "value")]
        present = [names.present_self(i, "key"), names.present_self(i, "value")]  # (R, h, P+1, d_k)
        out = g.fresh("self_attention")
        attention_inputs = [q, k, v, g.const(f"l{i}.self.qkv.bias", b_qkv), "", self_bias, *past]
        g.node("MultiHeadAttention", attention_inputs, [out, *present], num_heads=h, scale=scale)
        x = g.op("Add", x, g.linear(out, sa.out_proj, f"l{i}.self.out"))  # (R, 1, d_model)
        if not pre:
            x = g.layer_norm(x, s0.norm, f"l{i}.norm0")
        # cross-attention: the k hypotheses of a sentence are one query sequence over its keys/values
        a = g.layer_norm(x, s1.norm, f"l{i}.norm1") if pre else x
        ca = layer.cross_attn
        q = g.op("Reshape", g.linear(a, ca.q_proj, f"l{i}.cross.q", scale), grouped)
        q = g.op("Transpose", q, perm=[0, 2, 1, 3])  # (N, h, k, d_k)
        keys_t = g.op("Transpose", names.cross(i, "key"), perm=[0, 1, 3, 2])  # (N, h, d_k, S)
        weights = g.op("Softmax", g.op("Add", g.op("MatMul", q, keys_t), cross_bias), axis=-1)  # (N, h, k, S)
        out = g.op("Transpose", g.op("MatMul", weights, names.cross(i, "value")), perm=[0, 2, 1, 3])  # (N, k, h, d_k)
        x = g.op("Add", x, g.linear(g.op("Reshape", out, rows), ca.out_proj, f"l{i}.cross.out"))
        if not pre:
            x = g.layer_norm(x, s1.norm, f"l{i}.norm1")
        # position-wise feed-forward
        a = g.layer_norm(x, s2.norm, f"l{i}.norm2") if pre else x
        ff = layer.feed_forward
        hidden = g.activation(g.linear(a, ff.w_1, f"l{i}.ff.w1"), cfg.activation)
        x = g.op("Add", x, g.linear(hidden, ff.w_2, f"l{i}.ff.w2"))
        if not pre:
            x = g.layer_norm(x, s2.norm, f"l{i}.norm2")
    if pre:
        x = g.layer_norm(x, m.decoder_norm, "decoder_norm")
    logits = g.op("MatMul", x, g.const("generator", m.generator.weight.T))  # (R, 1, V)
    if m.logits_bias is not None:
        logits = g.op("Add", logits, g.const("logits_bias", m.logits_bias))
    g.node("LogSoftmax", [g.op("Squeeze", logits, axis1)], [names.DEC_LOG_PROBS], axis=-1)  # (R, V)

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    R, N, S = names.BATCH_AXIS, names.SENTENCE_AXIS, names.SRC_AXIS
    inputs = [
        helper.make_tensor_value_info(names.DEC_INPUT_IDS, i64, [R, 1]),
        helper.make_tensor_value_info(names.DEC_ENCODER_MASK, i64, [N, S]),
        helper.make_tensor_value_info(names.DEC_POSITIONS, i64, [R]),
        helper.make_tensor_value_info(names.DEC_SELF_MASK, i64, [R, names.TOTAL_AXIS]),
        *(helper.make_tensor_value_info(n, f32, [R, h, names.PAST_AXIS, d_k]) for n in names.past_names(L)),
        *(helper.make_tensor_value_info(n, f32, [N, h, S, d_k]) for n in names.cross_names(L)),
    ]
    outputs = [
        helper.make_tensor_value_info(names.DEC_LOG_PROBS, f32, [R, cfg.tgt_vocab_size]),
        *(helper.make_tensor_value_info(n, f32, [R, h, names.TOTAL_AXIS, d_k]) for n in names.present_names(L)),
    ]
    graph = helper.make_graph(g.nodes, "decoder_step_fused", inputs, outputs, initializer=g.initializers)
    onnx_model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS_DOMAIN, 1)], ir_version=8
    )
    return cast(bytes, onnx_model.SerializeToString())
