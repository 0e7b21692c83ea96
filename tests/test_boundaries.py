"""Layer boundaries: the engine and the service never reach torch, the model, the export or the training code; the
model never reaches onnxruntime or the web stack. Checked on the source (every import, lazy ones included, followed
through the package's own modules) and at run time (what importing them really loads)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transduce"
TORCH_SIDE = ("torch", "transduce.model", "transduce.export", "transduce.training")
RULES = {
    # onnx: the serving image has onnxruntime only (transduce.engine.topk writes its graph's bytes by hand)
    "transduce.engine": (*TORCH_SIDE, "onnx", "fastapi", "starlette", "uvicorn", "transduce.service"),
    "transduce.service": (*TORCH_SIDE, "onnx"),
    "transduce.tokenizer": (*TORCH_SIDE, "onnxruntime", "fastapi"),
    "transduce.model": ("onnxruntime", "fastapi", "starlette", "uvicorn", "transduce.engine", "transduce.service"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(module: str) -> set[str]:
    """Every module an import statement of ``module`` names (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # "from pkg import submodule"
    return found


def reachable(start: str) -> dict[str, list[str]]:
    """Every module ``start`` may import, directly or through the package's own modules, with one import chain."""
    chains: dict[str, list[str]] = {start: [start]}
    todo = [start]
    while todo:
        current = todo.pop()
        for name in sorted(imports_of(current)):
            if name in chains:
                continue
            chains[name] = [*chains[current], name]
            if name in MODULES:
                todo.append(name)
    return chains


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_never_reaches_what_it_must_not(layer: str) -> None:
    assert any(under(m, layer) for m in MODULES), f"no module under {layer}"
    for module in sorted(m for m in MODULES if under(m, layer)):
        for name, chain in reachable(module).items():
            bad = [p for p in RULES[layer] if under(name, p)]
            assert not bad, f"{layer} must not import {bad[0]}: {' -> '.join(chain)}"


def test_the_checker_sees_a_lazy_import_through_another_module() -> None:
    chain = reachable("transduce.shipped")["transduce.export.onnx_export"]  # shipped exports lazily, in a function
    assert chain == ["transduce.shipped", "transduce.export.onnx_export"]
    assert "torch" in reachable("transduce.export.onnx_export")


def test_importing_the_engine_and_the_service_loads_no_torch() -> None:
    serving = sorted(m for m in MODULES if under(m, "transduce.engine") or under(m, "transduce.service"))
    code = (
        "import importlib, sys\n"
        f"for m in {serving!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or m.startswith(('transduce.model', "
        "'transduce.export', 'transduce.training')))\n"
        "print(len(sys.modules), bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
