"""ab.log -> the README's table: peak RSS range and best tokens/s of 3 fresh processes, before and after."""

import json
from collections import defaultdict

runs = defaultdict(list)
for line in open("ab.log"):
    _, model, _, beam, batch, threads, version, result = line.split(" ", 7)
    runs[(model, beam, batch, threads, version)].append(json.loads(result))
print("| model | beam | batch | threads | peak RSS MB before → after | tokens/s before → after (best of 3) | after / before |")
print("|---|---|---|---|---|---|---|")
for model in ("fp32", "int8"):
    for cfg in (("beam1", "b1", "t1"), ("beam1", "b1", "t2"), ("beam1", "b32", "t2"), ("beam4", "b32", "t2")):
        b, n = runs[(model, *cfg, "base")], runs[(model, *cfg, "new")]
        assert all(x["out"] == b[0]["out"] for x in b + n)  # the same number of output tokens every run
        rb, rn = sorted(x["rss"] for x in b), sorted(x["rss"] for x in n)
        tb, tn = max(x["tps"] for x in b), max(x["tps"] for x in n)
        print(
            f"| {model} | {cfg[0][4:]} | {cfg[1][1:]} | {cfg[2][1:]} | {rb[0]:.0f}–{rb[-1]:.0f} → {rn[0]:.0f}–{rn[-1]:.0f}"
            f" | {tb:.0f} → {tn:.0f} | {tn / tb:.2f}× |"
        )
