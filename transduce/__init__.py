"""transduce: a machine-translation server (the paper's Transformer, exported to ONNX, served by onnxruntime).

Subpackages: ``model`` (PyTorch), ``training``, ``export`` (checkpoint -> ONNX), ``engine`` (torch-free inference),
``service`` (FastAPI), ``interop`` (Marian/CTranslate2), ``bench``; ``cli`` is the ``transduce`` command.
"""
