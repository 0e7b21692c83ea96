"""The service in auto mode (2 replicas of 1 thread on 2 cores): requests/s and the server's peak RSS. JSON lines."""
import json, os, signal, sys, time
from pathlib import Path
from transduce.bench import load as L
model, tag = sys.argv[1], sys.argv[2]
sentences = json.load(open("/tmp/g21/verses.json"))[:256]
proc, url = L.serve(model, "auto", 2)
def hwm(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"): return int(line.split()[1]) // 1024
try:
    ready = hwm(proc.pid)
    L._level(url, proc.pid, L.workload(sentences, 32, 4, False), 16, None)  # warm-up
    out = {"tree": tag, "ready_mb": ready}
    for beam, mixed, c in [(4, False, 16), (4, False, 64), (1, False, 64), (4, True, 64)]:
        row = L._level(url, proc.pid, L.workload(sentences, 256, beam, mixed), c, None)
        out[f"b{beam}{'m' if mixed else ''}c{c}"] = row["requests_per_s"]
    out["peak_mb"] = hwm(proc.pid)
    print(json.dumps(out), flush=True)
finally:
    proc.send_signal(signal.SIGTERM); proc.wait(60)
