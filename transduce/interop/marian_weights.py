"""Weight-name mapping between transduce's Transformer and Hugging Face ``MarianMTModel`` (and HF file I/O)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor

from transduce.model.checkpoint import unreadable

# (our sub-module, HF sub-module, role); role says how a residual-stream permutation acts on it:
# "in": reads the residual stream (permute weight columns), "out": writes it (permute weight rows and bias),
# "norm": LayerNorm over it (permute weight and bias).
_ATTN = (("q_proj", "in"), ("k_proj", "in"), ("v_proj", "in"), ("out_proj", "out"))
ENCODER_LAYER = (
    *((f"self_attn.{p}", f"self_attn.{p}", r) for p, r in _ATTN),
    ("sublayer.0.norm", "self_attn_layer_norm", "norm"),
    ("feed_forward.w_1", "fc1", "in"),
    ("feed_forward.w_2", "fc2", "out"),
    ("sublayer.1.norm", "final_layer_norm", "norm"),
)
DECODER_LAYER = (
    *((f"self_attn.{p}", f"self_attn.{p}", r) for p, r in _ATTN),
    ("sublayer.0.norm", "self_attn_layer_norm", "norm"),
    *((f"cross_attn.{p}", f"encoder_attn.{p}", r) for p, r in _ATTN),
    ("sublayer.1.norm", "encoder_attn_layer_norm", "norm"),
    ("feed_forward.w_1", "fc1", "in"),
    ("feed_forward.w_2", "fc2", "out"),
    ("sublayer.2.norm", "final_layer_norm", "norm"),
)

EXCLUDED_BIAS = -1e4  # logit bias of the appended pad row: exp(-1e4 - lse) is exactly 0 in float32


def layer_names(n_encoder: int, n_decoder: int) -> list[tuple[str, str, str]]:
    """(our parameter, HF parameter without the "model." prefix, role) for every weight and bias of every layer."""
    out = []
    for ours_stack, hf_stack, n, table in (
        ("encoder_layers", "encoder.layers", n_encoder, ENCODER_LAYER),
        ("decoder_layers", "decoder.layers", n_decoder, DECODER_LAYER),
    ):
        for i in range(n):
            for ours, hf, role in table:
                for kind in ("weight", "bias"):
                    out.append((f"{ours_stack}.{i}.{ours}.{kind}", f"{hf_stack}.{i}.{hf}.{kind}", f"{role}.{kind}"))
    return out


def permute(tensor: Tensor, role: str, perm: Tensor) -> Tensor:
    """Apply the residual-stream permutation ``perm`` (new dim c = old dim perm[c]) to one parameter."""
    if role == "in.weight":
        return tensor[:, perm]
    if role in ("out.weight", "out.bias", "norm.weight", "norm.bias"):
        return tensor[perm]
    assert role == "in.bias", role
    return tensor


def interleaved_to_concat(d_model: int) -> Tensor:
    """perm with concat[:, c] = interleaved[:, perm[c]]: sin dims 0,2,4,... then cos dims 1,3,5,..."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _strip(state: dict[str, Tensor]) -> dict[str, Tensor]:
    return {(k[len("model.") :] if k.startswith("model.") else k): v for k, v in state.items()}


def read_hf_weights(hf_dir: Path) -> dict[str, Tensor]:
    """Tensors of an HF model dir (safetensors, sharded safetensors or pytorch_model.bin), "model." prefix stripped."""
    single, index, binary = hf_dir / "model.safetensors", hf_dir / "model.safetensors.index.json", None
    if single.is_file() or index.is_file():
        try:
            from safetensors.torch import load_file
        except ImportError as exc:
            raise ValueError("reading .safetensors weights needs the safetensors package") from exc
        state: dict[str, Tensor] = {}
        try:
            files = (
                [single]
                if single.is_file()
                else sorted({hf_dir / f for f in json.loads(index.read_text())["weight_map"].values()})
            )
            for f in files:
                state.update(load_file(str(f)))
        except Exception as exc:  # noqa: BLE001 - safetensors and a malformed index raise many types
            raise ValueError(f"cannot read the weights of {hf_dir} ({type(exc).__name__}: {exc})") from exc
        return _strip(state)
    for name in ("pytorch_model.bin",):
        if (hf_dir / name).is_file():
            binary = hf_dir / name
    if binary is None:
        raise ValueError(f"{hf_dir} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin")
    try:
        state = torch.load(binary, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for corrupt files
        raise ValueError(f"cannot read {binary} ({unreadable(exc)})") from exc
    return _strip(state)


def write_safetensors(path: Path, state: dict[str, Tensor]) -> None:
    """Write float32 tensors (contiguous, unshared) as model.safetensors."""
    try:
        from safetensors.torch import save_file
    except ImportError as exc:
        raise ValueError("writing an HF model directory needs the safetensors package") from exc
    save_file(
        {k: v.detach().float().contiguous().clone() for k, v in state.items()}, str(path), metadata={"format": "pt"}
    )
    umask = os.umask(0)  # (safetensors writes 0600: the other files of the directory follow the umask)
    os.umask(umask)
    path.chmod(0o666 & ~umask)
