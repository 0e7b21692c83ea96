"""Flat-tensor wrappers around ``Transformer.encode``/``decode_step``: exactly what the two ONNX graphs compute."""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce.engine import io_names as names
from transduce.model.transformer import DecoderLayer, Transformer, sublayer


class EncoderGraph(nn.Module):
    """(input_ids, attention_mask) -> (last_hidden_state, cross K/V of every decoder layer, layer-major)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, ...]:
        """Encode once per request; the decoder then only reads the returned cross-attention keys/values."""
        memory = self.model.encode(input_ids, attention_mask.bool())  # (B, S, d_model)
        flat = [t for kv in self.model.cross_kv(memory) for t in kv]  # 2L x (B, h, S, d_k)
        return (memory, *flat)


class DecoderStepGraph(nn.Module):
    """(input_ids, encoder_attention_mask, position_ids, decoder_attention_mask, past K/V..., cross K/V...)
    -> (log_probs, present K/V...).

    Rows of input_ids, position_ids, decoder_attention_mask and past K/V are hypotheses; encoder_attention_mask and
    cross K/V have one row per sentence.

    The same computation as ``Transformer.decode_step`` for one new token per row, written for the exported graph:
    with one position per row, head splits and merges are reshapes with constant shapes, and each attention mask
    becomes an additive bias once for all layers; the graph has about half the nodes of a trace of the general
    ``decode_step`` (which handles any number of new tokens), and a decoder step at batch 1 is mostly per-node
    overhead. Activations keep their (R, 1, d_model) shape so the projections stay MatMuls, which int8 quantisation
    handles (it does not quantise Gemm). Export verification compares it with ``decode_step`` in PyTorch.
    """

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model
        self.n_layers = model.config.n_decoder_layers

    def forward(
        self,
        input_ids: Tensor,
        encoder_attention_mask: Tensor,
        position_ids: Tensor,
        decoder_attention_mask: Tensor,
        *caches: Tensor,
    ) -> tuple[Tensor, ...]:
        """One incremental decoding step: one new token per row, at the row's own position."""
        m, L = self.model, self.n_layers
        h, d_k, d = m.config.n_heads, m.config.d_k, m.config.d_model
        pe = cast(Tensor, m.pe)
        x = m.tgt_embed(input_ids) * m.embed_scale + pe[position_ids][:, None, :]  # (R, 1, d_model)
        blocked = torch.finfo(x.dtype).min  # additive mask: a blocked position's weight underflows to 0
        zero = torch.zeros((), dtype=x.dtype)
        self_bias = torch.where(decoder_attention_mask.bool(), zero, blocked)[:, None, None, :]  # (R, 1, 1, P+1)
        cross_bias = torch.where(encoder_attention_mask.bool(), zero, blocked)[:, None, :]  # (N, 1, 1, S) below
        cross_bias = cross_bias[:, :, None, :]
        sentences = encoder_attention_mask.shape[0]  # N: beams of a sentence share its cross K/V
        scale = 1.0 / math.sqrt(d_k)
        present: list[Tensor] = []
        for i, layer in enumerate(m.decoder_layers):
            layer = cast(DecoderLayer, layer)
            s0, s1, s2 = (sublayer(layer, j) for j in range(3))
            a = s0.normed_input(x)
            attn = layer.self_attn
            q = attn.q_proj(a).reshape(-1, h, 1, d_k)  # (R, h, 1, d_k)
            k = torch.cat([caches[2 * i], attn.k_proj(a).reshape(-1, h, 1, d_k)], dim=2)  # (R, h, P+1, d_k)
            v = torch.cat([caches[2 * i + 1], attn.v_proj(a).reshape(-1, h, 1, d_k)], dim=2)
            weights = torch.softmax((q @ k.transpose(-2, -1)) * scale + self_bias, dim=-1)  # (R, h, 1, P+1)
            x = s0(x, attn.out_proj((weights @ v).reshape(-1, 1, d)))
            present += [k, v]
            attn = layer.cross_attn
            ck, cv = caches[2 * L + 2 * i], caches[2 * L + 2 * i + 1]  # (N, h, S, d_k)
            q = attn.q_proj(s1.normed_input(x)).reshape(sentences, -1, h, d_k).transpose(1, 2)  # (N, h, k, d_k)
            weights = torch.softmax((q @ ck.transpose(-2, -1)) * scale + cross_bias, dim=-1)  # (N, h, k, S)
            x = s1(x, attn.out_proj((weights @ cv).transpose(1, 2).reshape(-1, 1, d)))  # (R, 1, d_model)
            x = s2(x, layer.feed_forward(s2.normed_input(x)))
        logits = m.generator(m.decoder_norm(x))  # (R, 1, V)
        if m.logits_bias is not None:
            logits = logits + m.logits_bias
        return (F.log_softmax(logits.float(), dim=-1).reshape(-1, logits.shape[-1]), *present)  # (R, V)


def dummy_inputs(
    model: Transformer, batch: int = 2, src_len: int = 5, past_len: int = 3, beams: int = 2
) -> dict[str, tuple[Tensor, ...]]:
    """Example inputs for tracing both graphs (sizes differ on every axis so no dimension gets fused by accident).

    The decoder gets ``batch * beams`` rows over ``batch`` sentences, so the traced graph shares cross K/V per sentence.
    """
    cfg = model.config
    ids = torch.randint(4, cfg.src_vocab_size, (batch, src_len))
    mask = torch.ones(batch, src_len, dtype=torch.int64)
    mask[0, -1] = 0
    dtype = next(model.parameters()).dtype  # the caches are in the weights' precision
    cache = torch.zeros(batch * beams, cfg.n_heads, past_len, cfg.d_k, dtype=dtype)
    cross = torch.zeros(batch, cfg.n_heads, src_len, cfg.d_k, dtype=dtype)
    L = cfg.n_decoder_layers
    start = torch.full((batch * beams, 1), cfg.decoder_start_id)
    positions = torch.arange(batch * beams) % (past_len + 1)  # rows at different steps of their own decoding
    self_mask = (torch.arange(past_len + 1)[None, :] >= past_len - positions[:, None]).long()  # padding at the start
    dec = (start, mask, positions, self_mask, *([cache] * (2 * L)), *([cross] * (2 * L)))
    return {"encoder": (ids, mask), "decoder": dec}


def gather_graph(n_tensors: int, opset: int, dtype: str = "float32") -> bytes:
    """A tiny ONNX graph gathering ``n_tensors`` float tensors along axis 0 by one index (device-side cache reorder)."""
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype]

    rows = helper.make_tensor_value_info(names.GATHER_ROWS, TensorProto.INT64, ["new_rows"])
    inputs, outputs, nodes = [rows], [], []
    for i in range(n_tensors):
        src, dst = names.gather_input(i), names.gather_output(i)
        inputs.append(helper.make_tensor_value_info(src, elem, ["rows", "h", f"n{i}", "d"]))
        outputs.append(helper.make_tensor_value_info(dst, elem, ["new_rows", "h", f"n{i}", "d"]))
        nodes.append(helper.make_node("Gather", [src, names.GATHER_ROWS], [dst], axis=0))
    graph = helper.make_graph(nodes, "gather_rows", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return model.SerializeToString()
