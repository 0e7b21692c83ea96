import re, sys, pickle
from pathlib import Path
def rss():
    return int(re.search(r'VmRSS:\s+(\d+)', Path('/proc/self/status').read_text()).group(1)) // 1024
from transduce.engine.heap import give_memory_back
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
from transduce.engine.session import release_memory
srcs = pickle.load(open('/tmp/g25/srcs.pkl', 'rb'))[:64]
for i in range(2):
    for p in ('/root/.cache/transduce/default-onnx', '/tmp/g25/int8'):
        t = Translator(p, device='cpu', intra_threads=1, shared_pool=True)
        a = rss()
        t.translate_batch(srcs, options=DecodeOptions(beam_size=4, chunk_size=32))
        b = rss()
        del t; give_memory_back(); c = rss(); release_memory()
        print(i, p[-4:], 'loaded', a, 'used', b, 'unloaded', c, 'released', rss())
