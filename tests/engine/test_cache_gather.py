"""The CPU runner's cache reorder on onnxruntime's Gather kernel (on a shared pool of 2 threads or more) gathers
exactly as numpy's does; a pool of one thread, or an export without a usable gather graph, keeps numpy's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _run(script: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_onnxruntime_gather_reorders_as_numpy_does(
    shortlist_model_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """In a fresh process (the shared pool is made once per process), on a pool of 2 threads: the runner's reorder
    equals numpy's for rows kept, repeated, dropped and grown, on the empty cache and after steps; beam search (rows
    reordered every step, finished sentences leaving) translates the same with and without the gather session; an
    export whose gather graph is missing loads and reorders with numpy."""
    broken = tmp_path / "no-gather"
    script = f"""
import json, shutil
from pathlib import Path
import numpy as np
from transduce.engine.cache import reorder
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
out = {{}}
for model in ({str(shortlist_model_dir)!r}, {str(tiny_model_dir)!r}):
    engine = Translator(model, device="cpu", intra_threads=2, shared_pool=True)
    runner = engine.runners[0]
    gather = runner.sessions.cache_gather
    calls = []
    def counted(names, feed):
        calls.append(len(feed["rows"]))
        return gather(names, feed)
    runner.sessions.cache_gather = counted
    ids = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 12, 13, 3, 0]], np.int64)
    state = runner.encode(ids, (ids != 0).astype(np.int64))
    same = []
    for step in range(4):
        for rows in ([2, 0, 1], [0, 0, 2, 2, 1, 1], [1], [0, 1, 2]):
            rows = np.array(rows)
            mine, numpy_ = runner._gathered(state.past, rows), reorder(state.past, rows)
            same.append(all(np.array_equal(mine[n], numpy_[n]) and mine[n].dtype == numpy_[n].dtype for n in mine))
        runner.step(np.array([4, 5, 6]), state)
    sources = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23, 24], [30, 31]]
    options = DecodeOptions(beam_size=3, num_hypotheses=3, return_scores=True, max_decoding_length=12)
    beams = []
    for on in (True, False):
        runner.sessions.cache_gather = counted if on else None
        beams.append([(r.tokens, r.scores) for r in engine.translate_batch(sources, options=options)])
    out[model] = [gather is not None, len(calls) > 12, all(same), beams[0] == beams[1]]
shutil.copytree({str(tiny_model_dir)!r}, {str(broken)!r})
Path({str(broken)!r}, "gather.onnx").unlink()
manifest = json.loads(Path({str(broken)!r}, "manifest.json").read_text())
manifest["checksums"].pop("gather.onnx")
manifest.pop("gather")  # as an export that names none (the default file is then missing)
Path({str(broken)!r}, "manifest.json").write_text(json.dumps(manifest))
engine = Translator({str(broken)!r}, device="cpu", intra_threads=2, shared_pool=True)
done = engine.translate(["Hello world."], source_lang="en", target_lang="de")
out["no gather graph"] = [engine.runners[0].sessions.cache_gather is None, len(done)]
print(json.dumps(out))
"""
    out = _run(script)
    for model in (str(shortlist_model_dir), str(tiny_model_dir)):
        assert out[model] == [True, True, True, True], (model, out[model])
    assert out["no gather graph"] == [True, 1]


def test_a_pool_of_one_thread_keeps_numpys_gather(tiny_model_dir: Path) -> None:
    out = _run(f"""
import json
from transduce.engine.translator import Translator
engine = Translator({str(tiny_model_dir)!r}, device="cpu", intra_threads=1, shared_pool=True)
print(json.dumps({{"gather": engine.runners[0].sessions.cache_gather is not None}}))
""")
    assert out == {"gather": False}
