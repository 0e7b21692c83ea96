for round in 1 2 3; do
for cfg in "1 1 1" "1 1 2" "1 32 2" "4 32 2"; do
 for p in "/root/.cache/transduce/default-onnx transduce-cpu-fp32" "/tmp/g25/int8 transduce-cpu-int8"; do
  for v in base new; do
   if [ $v = base ]; then pp=/tmp/g25/base; else pp=/work/main; fi
   set -- $cfg; r=$(PYTHONPATH=$pp python child.py $p $1 $2 $3 2>/dev/null); echo "$round $p beam$1 b$2 t$3 $v $r"
  done
 done
done; done
