"""On the lent GPU: where the service's time goes on CUDA. For each mode, a server on CUDA, py-spy attached, one
closed-loop level; then the engine alone under py-spy. Writes $OUT/<name>.txt (collapsed stacks) and prints rows."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
from transduce.bench import load as L

out = Path("/tmp/prof"); out.mkdir(exist_ok=True)
model = sys.argv[1]
spy = sys.argv[2]
pairs = [l.split("\t")[0] for l in Path(".gpucheck/pairs.tsv").read_text().splitlines()][:256]
plan = [("static", 4, 64), ("step", 4, 64), ("replicas", 4, 64), ("static", 1, 64)]
for mode, beam, conc in plan:
    proc, url = L.serve(model, mode, 4)
    try:
        load = L.workload(pairs, 256, beam, False)
        L._level(url, proc.pid, load[:32], conc, None)  # warm-up
        name = f"{mode}-b{beam}-c{conc}"
        p = subprocess.Popen([spy, "record", "--pid", str(proc.pid), "--format", "raw", "--rate", "250",
                              "--nonblocking", "-o", str(out / f"{name}.txt")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
        row = L._level(url, proc.pid, load + load, conc, None)
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill(); err = b"py-spy timeout"
        print(name, json.dumps(row), err.decode(errors="replace")[-300:], flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
