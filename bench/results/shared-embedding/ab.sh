cd /work/main && . .venv/bin/activate
for r in 1 2; do
for cfg in "1 1 100" "32 1 500" "32 4 500"; do
 for d in fp32 int8; do
  PYTHONPATH=/tmp/g26/base python /tmp/g26/ab.py /tmp/g26/old-$d $cfg | sed 's/^/old /'
  if [ $d = fp32 ]; then np=/root/.cache/transduce/default-onnx; else np=/tmp/g26/new-int8; fi
  python /tmp/g26/ab.py $np $cfg | sed 's/^/new /'
 done
done
done
