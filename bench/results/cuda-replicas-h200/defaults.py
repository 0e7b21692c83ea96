"""On the lent GPU: the service's defaults after the change vs explicit old settings. JSON lines to stdout."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import httpx
from transduce.bench import load as L

model = sys.argv[1]
pairs = [l.split("\t")[0] for l in Path(".gpucheck/pairs.tsv").read_text().splitlines()][:256]
configs = [("old default: 1 replica, 16 threads", {"TRANSDUCE_ENGINE_REPLICAS": "1", "TRANSDUCE_INTRA_THREADS": "16"}),
           ("new default (auto)", {}),
           ("2 replicas of 8 threads", {"TRANSDUCE_ENGINE_REPLICAS": "2", "TRANSDUCE_INTRA_THREADS": "8"}),
           ("1 replica, auto threads", {"TRANSDUCE_ENGINE_REPLICAS": "1"}),
           ("new default (auto) again", {})]
levels = [(4, False, 16), (4, False, 64), (1, False, 16), (1, False, 64), (4, True, 64)]

def serve(extra):
    port = L._free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSDUCE_ENGINE_REPLICAS", "TRANSDUCE_INTRA_THREADS")}
    env |= {"TRANSDUCE_MODEL_DIR": model, "TRANSDUCE_PORT": str(port), "TRANSDUCE_HOST": "127.0.0.1",
            "TRANSDUCE_MAX_QUEUE_ITEMS": "100000", "TRANSDUCE_LOG_JSON": "false", "TRANSDUCE_CACHE_SIZE": "0"} | extra
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "transduce", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if httpx.get(url + "/health/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("not ready")

for name, extra in configs:
    proc, url = serve(extra)
    threads = len(os.listdir(f"/proc/{proc.pid}/task"))
    try:
        L._level(url, proc.pid, L.workload(pairs, 32, 4, False), 16, None)  # warm-up
        for beam, mixed, conc in levels:
            row = L._level(url, proc.pid, L.workload(pairs, 256, beam, mixed), conc, None)
            keep = {k: row[k] for k in ("requests_per_s", "p50_ms", "p99_ms", "short_p99_ms", "mean_batch_size", "errors", "cpu_ms_per_request")}
            print(json.dumps({"config": name, "os_threads": threads, "beam": beam, "mixed": mixed, "c": conc} | keep), flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
