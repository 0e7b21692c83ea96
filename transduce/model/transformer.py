"""The encoder-decoder Transformer (section 3) with ``encode`` and an incremental ``decode_step``."""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn

from transduce.model.config import ModelConfig
from transduce.model.layers import KV, MultiHeadAttention, PositionwiseFeedForward, SublayerConnection, sinusoid_table


def sublayer(layer: nn.Module, i: int) -> SublayerConnection:
    """The i-th sub-layer connection of a layer (typed access into its ModuleList)."""
    return cast(SublayerConnection, cast(nn.ModuleList, layer.sublayer)[i])


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a sub-layer connection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.sublayer = nn.ModuleList([SublayerConnection(config) for _ in range(2)])

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """(B, S, d_model) -> (B, S, d_model); ``mask`` (B, 1, 1, S)."""
        h = sublayer(self, 0).normed_input(x)
        x = sublayer(self, 0)(x, self.self_attn(h, self.self_attn.project_kv(h), mask))
        return sublayer(self, 1)(x, self.feed_forward(sublayer(self, 1).normed_input(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention (with a growing cache), cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.cross_attn = MultiHeadAttention(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.sublayer = nn.ModuleList([SublayerConnection(config) for _ in range(3)])

    def forward(
        self, x: Tensor, past: KV | None, self_mask: Tensor | None, cross_kv: KV, cross_mask: Tensor
    ) -> tuple[Tensor, KV]:
        """One layer on the new positions ``x`` (B, T, d_model); returns the output and the extended cache."""
        h = sublayer(self, 0).normed_input(x)
        k, v = self.self_attn.project_kv(h)  # (B, h, T, d_k)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, h, P+T, d_k)
        x = sublayer(self, 0)(x, self.self_attn(h, (k, v), self_mask))
        x = sublayer(self, 1)(x, self.cross_attn(sublayer(self, 1).normed_input(x), cross_kv, cross_mask))
        x = sublayer(self, 2)(x, self.feed_forward(sublayer(self, 2).normed_input(x)))
        return x, (k, v)


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``forward`` (training) composes ``encode``, ``cross_kv`` and ``decode_step``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.src_embed = nn.Embedding(config.src_vocab_size, d, padding_idx=config.pad_id)
        self.tgt_embed = self.src_embed if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, d)
        self.generator = nn.Linear(d, config.tgt_vocab_size, bias=False)
        self.generator.weight = self.tgt_embed.weight  # pre-softmax projection shares the target embedding (3.4)
        self.logits_bias = nn.Parameter(torch.zeros(config.tgt_vocab_size)) if config.final_logits_bias else None
        self.register_buffer("pe", sinusoid_table(config.max_positions, d, config.sinusoid_layout), persistent=False)
        self.embed_scale = math.sqrt(d) if config.scale_embedding else 1.0
        self.dropout = nn.Dropout(config.dropout)
        self.encoder_layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.n_encoder_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.n_decoder_layers)])
        pre = config.norm_position == "pre"
        self.encoder_norm = nn.LayerNorm(d, eps=config.layer_norm_eps) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d, eps=config.layer_norm_eps) if pre else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights (as in the reference tensor2tensor code), N(0, d^-1/2) embeddings."""
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        nn.init.normal_(self.src_embed.weight, 0.0, self.config.d_model**-0.5)
        if self.tgt_embed is not self.src_embed:
            nn.init.normal_(self.tgt_embed.weight, 0.0, self.config.d_model**-0.5)
        with torch.no_grad():
            self.src_embed.weight[self.config.pad_id].zero_()

    def embed(self, embedding: nn.Embedding, ids: Tensor, start: Tensor | int) -> Tensor:
        """Scaled token embeddings plus sinusoidal positions from ``start`` (an int, or one per row (B,)):
        (B, T) -> (B, T, d_model)."""
        positions = torch.arange(ids.shape[1], device=ids.device) + (
            start[:, None] if torch.is_tensor(start) else start
        )
        return self.dropout(embedding(ids) * self.embed_scale + cast(Tensor, self.pe)[positions])  # (T,) or (B, T)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> Tensor:
        """Source ids (B, S) and mask (B, S, True = token) -> encoder memory (B, S, d_model)."""
        x = self.embed(self.src_embed, src_ids, 0)
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.encoder_layers:
            x = layer(x, mask)
        return self.encoder_norm(x)

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Cross-attention keys/values of every decoder layer, computed once per source: each (B, h, S, d_k)."""
        return [cast(DecoderLayer, layer).cross_attn.project_kv(memory) for layer in self.decoder_layers]

    def decode_step(
        self,
        tgt_ids: Tensor,
        cross_kv: list[KV],
        src_mask: Tensor,
        cache: list[KV] | None = None,
        *,
        positions: Tensor | None = None,
        self_mask: Tensor | None = None,
    ) -> tuple[Tensor, list[KV]]:
        """Decode new target tokens (R, T) after ``cache`` (per layer (R, h, P, d_k)) -> logits (R, T, V), new cache.

        ``cross_kv`` (per layer (N, h, S, d_k)) and ``src_mask`` (N, S) hold N sentences; R = N * k rows, the k
        consecutive rows of a sentence (its beams) share them (see MultiHeadAttention.forward).
        Rows whose histories differ in length (sentences that joined a running batch later) share one cache length P:
        ``positions`` (R,) is the position of each row's first new token (default P for every row) and ``self_mask``
        (R, P + T), True where a row may attend, hides each row's padding at the start of the cache.
        """
        past_len = cache[0][0].shape[2] if cache is not None else 0
        T = tgt_ids.shape[1]
        x = self.embed(self.tgt_embed, tgt_ids, past_len if positions is None else positions)  # (R, T, d_model)
        attend: Tensor | None = None  # one new position may attend to every cached one: no mask needed
        if T > 1:
            query_pos = torch.arange(T, device=tgt_ids.device)[:, None] + past_len  # (T, 1)
            key_pos = torch.arange(T + past_len, device=tgt_ids.device)[None, :]  # (1, P+T)
            attend = (key_pos <= query_pos)[None, None]  # (1, 1, T, P+T) causal: no attending to later positions
        if self_mask is not None:
            keys = self_mask.bool()[:, None, None, :]  # (R, 1, 1, P+T)
            attend = keys if attend is None else attend & keys
        cross_mask = src_mask[:, None, None, :]  # (N, 1, 1, S)
        new_cache: list[KV] = []
        for i, layer in enumerate(self.decoder_layers):
            x, kv = layer(x, cache[i] if cache is not None else None, attend, cross_kv[i], cross_mask)
            new_cache.append(kv)
        logits = self.generator(self.decoder_norm(x))  # (B, T, V)
        if self.logits_bias is not None:
            logits = logits + self.logits_bias
        return logits, new_cache

    def forward(self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V) for target inputs ``tgt_in`` (B, T)."""
        memory = self.encode(src_ids, src_mask)
        logits, _ = self.decode_step(tgt_in, self.cross_kv(memory), src_mask)
        return logits

    def num_parameters(self) -> int:
        """Number of distinct parameters (shared matrices counted once)."""
        return sum(p.numel() for p in self.parameters())
