cd /work/main && . .venv/bin/activate
for r in 1 2 3 4; do
for cfg in "32 4 500 2" "32 1 500 2" "1 1 100 1" "32 4 500 1"; do
 for g in 0 1; do
  TRANSDUCE_EXP_GATHER=$g python bench/results/shared-embedding/ab.py /root/.cache/transduce/default-onnx $cfg | sed "s/^/g=$g cfg=$(echo $cfg|tr ' ' _) /"
 done
done
done
