"""The Transformer of "Attention Is All You Need" in PyTorch, its tokenizer and checkpoint I/O.

Submodules are imported explicitly (``from model.transformer import Transformer``); ``model.tokenizer`` and
``model.config`` stay importable without torch so the torch-free engine can use them.
"""
