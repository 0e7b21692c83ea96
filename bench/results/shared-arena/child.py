import pickle, sys, json
import transduce
from transduce.bench.contenders import Job, run_transduce
from transduce.bench.engines import tokens_per_s
path, engine, beam, batch, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
srcs = pickle.load(open('/tmp/g25/srcs.pkl', 'rb'))
if batch == 1: srcs = srcs[:100]
out = run_transduce(Job(engine, path, srcs, beam, batch, threads))
print(json.dumps({'tps': round(tokens_per_s(out), 1), 'rss': round(out.peak_rss_mb, 1), 'out': sum(map(len, out.hyps)), 'src': transduce.__file__}))
