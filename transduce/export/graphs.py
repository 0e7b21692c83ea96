"""Flat-tensor wrappers around ``Transformer.encode``/``decode_step``: exactly what the two ONNX graphs compute."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce.engine import io_names as names
from transduce.model.transformer import Transformer


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
        L = self.n_layers
        past = [(caches[2 * i], caches[2 * i + 1]) for i in range(L)]
        cross = [(caches[2 * L + 2 * i], caches[2 * L + 2 * i + 1]) for i in range(L)]
        logits, present = self.model.decode_step(
            input_ids,
            cross,
            encoder_attention_mask.bool(),
            past,
            positions=position_ids,
            self_mask=decoder_attention_mask.bool(),
        )
        log_probs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (B, V)
        return (log_probs, *[t for kv in present for t in kv])


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
