"""Start-up faults end with one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRANSDUCE = [sys.executable, "-m", "transduce"]


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRANSDUCE, "serve", "--port", "1", *args], capture_output=True, text=True, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert fragment in result.stderr


def test_missing_model_directory(tmp_path: Path) -> None:
    assert_one_line_error(serve("--model", str(tmp_path / "nope")), "does not exist")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "tokenizer", "manifest"])
def test_damaged_model_directory(tiny_model_dir: Path, tmp_path: Path, damage: str) -> None:
    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    if damage == "truncate":
        data = (model / "encoder.onnx").read_bytes()
        (model / "encoder.onnx").write_bytes(data[: len(data) // 3])
        fragment = "corrupt or truncated"
    elif damage == "garbage":
        for graph in ("decoder.onnx", "decoder_cpu.onnx"):  # the CPU loads the second
            (model / graph).write_bytes(b"not an onnx file")
        manifest = json.loads((model / "manifest.json").read_text())
        manifest.pop("checksums")
        (model / "manifest.json").write_text(json.dumps(manifest))
        fragment = "cannot load the ONNX graphs"
    elif damage == "tokenizer":
        manifest = json.loads((model / "manifest.json").read_text())
        manifest["dims"]["tgt_vocab_size"] = 999
        (model / "manifest.json").write_text(json.dumps(manifest))
        fragment = "does not match the manifest"
    else:
        (model / "manifest.json").write_text("{")
        fragment = "not valid JSON"
    assert_one_line_error(serve("--model", str(model)), fragment)


def test_cuda_strict_without_a_gpu(tiny_model_dir: Path) -> None:
    import onnxruntime as ort

    result = serve("--model", str(tiny_model_dir), "--device", "cuda", "--strict-device")
    if "CUDAExecutionProvider" in ort.get_available_providers() and result.returncode == 0:
        pytest.skip("a usable CUDA device is present")  # pragma: no cover - GPU machines only
    assert_one_line_error(result, "CUDA")


def test_invalid_setting_is_named() -> None:
    result = subprocess.run([*TRANSDUCE, "serve", "--max-batch-size", "0"], capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, "max_batch_size")
