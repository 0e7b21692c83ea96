import sys, json, resource, hashlib, time
from transduce.engine.translator import Translator
from transduce.engine.options import DecodeOptions
path, bs, beam, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
threads = int(sys.argv[5]) if len(sys.argv) > 5 else 1  # a fifth argument: threads (bench/results/cache-gather)
t=Translator(path, device='cpu', intra_threads=threads, strict_device=True, shortlist=True, shared_pool=True)
src=json.load(open('/tmp/g26/ids.json'))[:n]
h=hashlib.sha256(); t0=time.perf_counter()
for i in range(0,n,bs):
    chunk=src[i:i+bs]
    res=t.translate_batch(chunk, options=DecodeOptions(beam_size=beam, chunk_size=bs, length_penalty=0.0, max_decoding_length=max(map(len,chunk))+50, min_decoding_length=1))
    for r in res: h.update(json.dumps(r.tokens[0]).encode())
el=time.perf_counter()-t0
rss=0
for l in open('/proc/self/status'):
    if l.startswith('VmRSS'): rss=int(l.split()[1])//1024
print(json.dumps({'path':path,'bs':bs,'beam':beam,'peak':resource.getrusage(resource.RUSAGE_SELF).ru_maxrss//1024,'rss':rss,'s':round(el,2),'hash':h.hexdigest()[:12]}))
