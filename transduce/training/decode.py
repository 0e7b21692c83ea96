"""Batched greedy decoding in PyTorch with the KV cache (dev BLEU during training; the engine serves with ONNX)."""

from __future__ import annotations

import torch

from transduce.model.transformer import Transformer


@torch.no_grad()
def greedy(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, max_extra: int = 50) -> list[list[int]]:
    """Greedy translations (ids without eos) of a padded batch; eos is not allowed as the first token."""
    cfg = model.config
    cross = model.cross_kv(model.encode(src, src_mask))
    B = src.shape[0]
    max_len = min(int(src_mask.sum(1).max()) + max_extra, cfg.max_positions - 1)
    tokens = torch.full((B, 1), cfg.decoder_start_id, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    out: list[list[int]] = [[] for _ in range(B)]
    cache = None
    for step in range(max_len):
        logits, cache = model.decode_step(tokens, cross, src_mask, cache)
        logits = logits[:, -1].float()
        if step == 0:
            logits[:, cfg.eos_id] = -float("inf")
        nxt = logits.argmax(-1)
        for b in range(B):
            if not done[b]:
                if int(nxt[b]) == cfg.eos_id:
                    done[b] = True
                else:
                    out[b].append(int(nxt[b]))
        if bool(done.all()):
            break
        tokens = nxt[:, None]
    return out
