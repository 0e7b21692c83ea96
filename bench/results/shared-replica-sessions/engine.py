"""Two engine replicas of 1 thread: their own sessions each (as today) vs one set of sessions run from both threads."""
import os, sys, json, time, hashlib, threading, queue
from pathlib import Path
def st(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key): return int(line.split()[1])/1024
import transduce.cli
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
from transduce.engine.numpy_runner import NumpyRunner
from transduce.engine import session as S
_orig = S.session_options
def _patched(*a, **k):
    o = _orig(*a, **k)
    if "noarena" in sys.argv[3]: o.enable_cpu_mem_arena = False
    return o
S.session_options = _patched
model, beam, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
texts = json.load(open("/tmp/g21/verses.json"))[:int(os.environ.get("N", "256"))]
base = st("VmRSS")
t = Translator(model, device="cpu", intra_threads=1, replicas=2, strict_device=True, shared_pool=True)
if variant.startswith("shared"):
    first = t.runners[0]
    t.runners = [first, NumpyRunner(first.sessions)]
    t._free = queue.SimpleQueue()
    for r in t.runners: t._free.put(r)
import gc; gc.collect()
from transduce.engine.heap import give_memory_back; give_memory_back()
loaded = st("VmRSS")
ids = [t.tokenizer.encode_source(x, "de") for x in texts]
order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
batches = [order[i:i+32] for i in range(0, len(order), 32)]
t.translate_batch([ids[0]], options=DecodeOptions(beam_size=beam))
out = {}
def work(mine):
    for b in mine:
        src = [ids[j] for j in b]
        opts = DecodeOptions(beam_size=beam, length_penalty=0.0, chunk_size=32, max_decoding_length=max(map(len, src))+50)
        for j, r in zip(b, t.translate_batch(src, options=opts)): out[j] = r.tokens[0]
start = time.perf_counter()
ths = [threading.Thread(target=work, args=(batches[k::2],)) for k in range(2)]
for th in ths: th.start()
for th in ths: th.join()
sec = time.perf_counter() - start
h = hashlib.md5(str([out[i] for i in range(len(ids))]).encode()).hexdigest()[:8]
print(f"{variant:9s} beam {beam}: load {loaded-base:.0f} MB (rss {loaded:.0f}), peak {st('VmHWM'):.0f} MB, {len(ids)/sec:.1f} sent/s, {h}", flush=True)
