"""The CPU runner's cache reorder on onnxruntime's Gather kernel (on a shared pool of 2 threads or more) translates
exactly as numpy's gather does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_the_onnxruntime_gather_reorders_as_numpy_does(shortlist_model_dir: Path, tiny_model_dir: Path) -> None:
    """In a fresh process (the shared pool is made once per process): an engine on a shared pool of 2 threads
    reorders its caches with the gather session, an engine of one thread has none, and with the session taken away
    the same engine translates the same, beam (rows reordered every step, finished sentences leaving) and greedy."""
    script = f"""
import json
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
sources = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23, 24], [30, 31]]
out = {{}}
for model in ({str(shortlist_model_dir)!r}, {str(tiny_model_dir)!r}):
    engine = Translator(model, device="cpu", intra_threads=2, shared_pool=True)
    sessions = engine.runners[0].sessions
    calls = []
    gather = sessions.cache_gather
    def counted(names, feed):
        calls.append(1)
        return gather(names, feed)
    sessions.cache_gather = counted
    results = []
    for on in (True, False):
        sessions.cache_gather = counted if on else None
        for beam in (3, 1):
            options = DecodeOptions(beam_size=beam, num_hypotheses=beam, return_scores=True, max_decoding_length=12)
            results.append([(r.tokens, r.scores) for r in engine.translate_batch(sources, options=options)])
    out[model] = [gather is not None, len(calls), results[:2] == results[2:]]
one = Translator({str(tiny_model_dir)!r}, device="cpu", intra_threads=1, shared_pool=True)
out["one thread"] = one.runners[0].sessions.cache_gather is None  # the pool is made: every engine runs on it
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for model in (str(shortlist_model_dir), str(tiny_model_dir)):
        has_gather, calls, same = out[model]
        assert has_gather and calls > 0 and same, (model, out[model])
    assert out["one thread"] is False  # the process's pool has 2 threads: a later engine gathers on it too
