import re, pickle
from pathlib import Path
def rss():
    return int(re.search(r'VmRSS:\s+(\d+)', Path('/proc/self/status').read_text()).group(1)) // 1024
from transduce.engine.options import DecodeOptions
from transduce.engine.translator import Translator
from transduce.engine.session import release_memory
srcs = pickle.load(open('/tmp/g25/srcs.pkl', 'rb'))
for p in ('/root/.cache/transduce/default-onnx', '/tmp/g25/int8'):
    t = Translator(p, device='cpu', intra_threads=1, shared_pool=True, replicas=2)
    t.translate_batch(srcs[:1], options=DecodeOptions(beam_size=4))
    a = rss()
    t.translate_batch(srcs, options=DecodeOptions(beam_size=4, chunk_size=32))
    b = rss(); release_memory(); c = rss()
    t.translate_batch(srcs[:1], options=DecodeOptions(beam_size=4)); d = rss()
    print(p[-4:], 'ready', a, 'after burst', b, 'released', c, 'after one more', d)
    del t; release_memory()
