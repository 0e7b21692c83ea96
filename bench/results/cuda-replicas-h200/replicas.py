"""On the lent GPU: engine replicas on CUDA. Each config a server; closed-loop levels; JSON lines to stdout."""
import json, signal, sys, time
from pathlib import Path
from transduce.bench import load as L

model = sys.argv[1]
pairs = [l.split("\t")[0] for l in Path(".gpucheck/pairs.tsv").read_text().splitlines()][:256]
configs = [("static", 4), ("replicas", 2), ("replicas", 4), ("replicas", 8), ("step", 4), ("step-replicas", 4),
           ("static", 4), ("replicas", 4)]
levels = [(4, False, 16), (4, False, 64), (1, False, 16), (1, False, 64), (4, True, 64)]
for mode, n in configs:
    t0 = time.time()
    proc, url = L.serve(model, mode, n)
    print("start", mode, n, round(time.time() - t0, 1), flush=True)
    try:
        L._level(url, proc.pid, L.workload(pairs, 32, 4, False), 16, None)  # warm-up
        for beam, mixed, conc in levels:
            row = L._level(url, proc.pid, L.workload(pairs, 256, beam, mixed), conc, None)
            keep = {k: row[k] for k in ("requests_per_s", "p50_ms", "p99_ms", "short_p99_ms", "mean_batch_size", "errors", "cpu_ms_per_request")}
            print(json.dumps({"mode": mode, "n": n, "beam": beam, "mixed": mixed, "c": conc} | keep), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
