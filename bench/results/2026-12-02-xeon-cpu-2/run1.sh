#!/bin/bash
# Xeon run 1 (helper xeon2): profile of the 1B prefill, head_dim 32/64 per backend, spec policy A/B.
set -u
B=/tmp/x2; export LD_LIBRARY_PATH=$B/lib
R=/tmp/x2r; M=/tmp/x2m; rm -rf $R; mkdir -p $R $M
T="taskset -c 0,1 env SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2"
{
date -u; lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; cat /proc/loadavg; free -g | head -2
for b in $B/new/* $B/old/*; do echo "$b $(sha1sum < $b | cut -c1-12)"; done
ldd $B/new/spindle | grep "not found"
small="--layers 6 --vocab 8192 --hidden 256 --intermediate 768"
$B/new/make_bench_model $M/llama1b | tail -1
$B/new/make_bench_model $M/small-hd32 $small --heads 8 --kv-heads 4 --head-dim 32 | tail -1
$B/new/make_bench_model $M/small-hd64 $small --heads 4 --kv-heads 2 --head-dim 64 | tail -1
date -u
} > $R/env.txt 2>&1
P="--model $M/llama1b --prompt 512 --decode 0"
run() { local name=$1; shift; echo "== $name ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"; "$@" > $R/$name.txt 2>&1; grep -E "^prefill|oneDNN|vs oneDNN|decode batch|linear|attention|rest|error" $R/$name.txt | grep -v "^loaded"; }
run pf-old $T $B/old/bench_model_forward $P
run pf-new $T $B/new/bench_model_forward $P --profile 1
run pf-passive $T OMP_WAIT_POLICY=passive $B/new/bench_model_forward $P --profile 1
run pf-spin0 $T SPINDLE_POOL_SPIN_US=0 $B/new/bench_model_forward $P --profile 1
run pf-amxbf16 $T $B/new/bench_model_forward $P --profile 1 --linear amx_bf16
run pf-avx512attn $T $B/new/bench_model_forward $P --profile 1 --attention-backend cpu_avx512
run pf-old2 $T $B/old/bench_model_forward $P
echo "== bench_linear --prefill-only ($(date -u +%T))"; $T $B/new/bench_linear --prefill-only > $R/linear-prefill.txt 2>&1; cat $R/linear-prefill.txt
for hd in 32 64; do for be in cpu_amx cpu_avx512 cpu_avx2; do
  run hd$hd-$be $T $B/new/bench_model_forward --model $M/small-hd$hd --context 981 --prompt 981 --steps 64 --profile 1 --attention-backend $be
done; done
for rep in 1 2; do for v in 9 1 2; do
  run sv-k4-amx$v-r$rep $T SPINDLE_LINEAR_AMX_BF16_MIN_ROWS=$v $B/new/bench_spec_verify --model models/kjv-tiny --backend cpu_amx --context 200 --k 4 --steps 80
  cat $R/sv-k4-amx$v-r$rep.txt
done; done
run sv-k4-exact $T $B/new/bench_spec_verify --model models/kjv-tiny --backend cpu_amx --context 200 --k 4 --steps 80 --matmul-precision exact; cat $R/sv-k4-exact.txt
printf '#!/bin/bash\nexec taskset -c 0,1 %s "$@"\n' $B/new/spindle > $B/spindle2; chmod +x $B/spindle2
for turn in 1 2; do for v in 9 1; do
  echo "== spec turn $turn min_rows $v ($(date -u +%T))"
  SPINDLE_LINEAR_AMX_BF16_MIN_ROWS=$v SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 SPINDLE=$B/spindle2 ROUNDS=1 LEVELS=1 PORT=8321 \
    taskset -c 2-15 timeout 120 bash bench/spec/run.sh $R/spec-v$v-t$turn > $R/spec-v$v-t$turn.log 2>&1
  tail -8 $R/spec-v$v-t$turn/summary.md
done; done
date -u
tar -C $R -czf $OUT/run1.tar.gz .
