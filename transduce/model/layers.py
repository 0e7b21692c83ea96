"""Building blocks of section 3: attention, position-wise FFN, sinusoidal positions, sub-layer connections."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce.model.config import ModelConfig

KV = tuple[Tensor, Tensor]  # (keys, values), each (B, h, T, d_k)


def sinusoid_table(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """Sinusoidal encodings (section 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d/2,)
    angles = position * inv_freq  # (P, d/2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2] = torch.sin(angles)
        table[:, 1::2] = torch.cos(angles)
    else:  # "concat": first half sin, second half cos (Marian / fairseq layout)
        table[:, : d_model // 2] = torch.sin(angles)
        table[:, d_model // 2 :] = torch.cos(angles)
    return table.float()


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (section 3.2.2) with an optional key/value cache."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.d_k = config.n_heads, config.d_k
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)
        self.attention_dropout = config.attention_dropout

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, h, T, d_k)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_k).transpose(1, 2)

    def project_kv(self, x: Tensor) -> KV:
        """Keys and values of ``x`` (B, S, d_model), each (B, h, S, d_k); used once per request for cross-attention."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, query: Tensor, kv: KV, mask: Tensor | None) -> Tensor:
        """Attend ``query`` (R, T, d_model) over ``kv`` (N, h, S, d_k); ``mask`` is True where attending is allowed.

        R = N * k: when kv has fewer rows than the query, each run of k consecutive query rows (the beams of one
        sentence) attends over the same sentence's keys/values, which are then stored once, not once per beam.
        """
        q = self.split_heads(self.q_proj(query))  # (R, h, T, d_k)
        k, v = kv
        grouped = k.shape[0] != q.shape[0]
        if grouped:  # (R, h, T, d_k) -> (N, h, k*T, d_k): one sentence's beams become one longer query
            T = q.shape[2]
            q = q.reshape(k.shape[0], -1, self.n_heads, T, self.d_k).transpose(1, 2)
            q = q.reshape(k.shape[0], self.n_heads, -1, self.d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (N, h, k*T, S) or (R, h, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        weights = F.dropout(weights, self.attention_dropout, self.training)
        out = weights @ v  # (N, h, k*T, d_k) or (R, h, T, d_k)
        if grouped:  # back to (R, h, T, d_k)
            out = out.reshape(k.shape[0], self.n_heads, -1, T, self.d_k).transpose(1, 2)
            out = out.reshape(-1, self.n_heads, T, self.d_k)
        return self.out_proj(out.transpose(1, 2).reshape(query.shape))  # (R, T, d_model)


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2 (section 3.3)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.w_1 = nn.Linear(config.d_model, config.d_ff)
        self.w_2 = nn.Linear(config.d_ff, config.d_model)
        activations: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "swish": F.silu, "gelu": F.gelu}
        self.activation = activations[config.activation]
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, T, d_model)."""
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class SublayerConnection(nn.Module):
    """Residual connection and LayerNorm around a sub-layer: post-norm (paper) or pre-norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm_position == "pre"

    def forward(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        """Post-norm: LayerNorm(x + Dropout(Sublayer(x))); pre-norm: x + Dropout(Sublayer(LayerNorm(x)))."""
        if self.pre_norm:
            return x + self.dropout(sublayer_out)
        return self.norm(x + self.dropout(sublayer_out))

    def normed_input(self, x: Tensor) -> Tensor:
        """The sub-layer's input: LayerNorm(x) for pre-norm, x itself for post-norm."""
        return self.norm(x) if self.pre_norm else x
