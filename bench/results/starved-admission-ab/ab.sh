#!/bin/bash
# A/B of the step scheduler's admission: old (235392b) vs new (918d80d), alternating, from their own checkouts
source /work/main/.venv/bin/activate
export TRANSDUCE_SHARED_DATA=/work/shared/data
for pair in 1 2; do
  for v in old new; do
    cd /tmp/g20/$v
    echo "== $v pair $pair $(date -u +%H:%M:%S)"
    python -m transduce bench load --modes step,step-replicas --concurrency 16,64 --arrivals "" --beam-size 4 \
      --model /root/.cache/transduce/default-onnx --out /tmp/g20/ab/$v-$pair > /tmp/g20/ab/$v-$pair.log 2>&1
    echo "rc $?"
  done
done
echo done $(date -u +%H:%M:%S)
