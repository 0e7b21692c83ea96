"""glibc keeps a decoder step's arrays on its heap instead of mapping them afresh every step."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_opening_an_engine_sets_the_malloc_thresholds_once(tiny_model_dir: object) -> None:
    script = f"""
import ctypes, json
from transduce.engine import heap
from transduce.engine.translator import Translator
calls = []
real = ctypes.CDLL
class Libc:
    def __init__(self, name): self.lib = real(name)
    def mallopt(self, param, value):
        calls.append([param, value]); return self.lib.mallopt(param, value)
ctypes.CDLL = Libc
Translator({str(tiny_model_dir)!r}, device="cpu", intra_threads=1)
Translator({str(tiny_model_dir)!r}, device="cpu", intra_threads=1)
print(json.dumps([heap.keep_step_arrays_on_heap(), calls]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[true, [[-3, 33554432], [-1, 67108864]]]"  # once, both accepted
