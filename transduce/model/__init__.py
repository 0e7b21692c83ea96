"""The Transformer of "Attention Is All You Need" in PyTorch and its checkpoint I/O (no HTTP, no onnxruntime).

Submodules are imported explicitly (``from transduce.model.transformer import Transformer``); the tokenizer, which
the torch-free engine shares, lives in ``transduce.tokenizer``.
"""
