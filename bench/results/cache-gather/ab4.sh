cd /work/main && . .venv/bin/activate
for r in 1 2 3; do
for cfg in "/root/.cache/transduce/default-onnx 32 4 500 2" "/tmp/g26/new-int8 32 4 500 2" "/root/.cache/transduce/default-onnx 32 1 500 2"; do
  PYTHONPATH=/tmp/g26/head python bench/results/shared-embedding/ab.py $cfg | sed "s/^/old /"
  python bench/results/shared-embedding/ab.py $cfg | sed "s/^/new /"
done
done
