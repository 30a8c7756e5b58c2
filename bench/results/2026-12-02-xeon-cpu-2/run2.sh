#!/bin/bash
# Xeon run 2 (helper xeon2; NOT RUN in its session, see README.md): tests on AMX (background,
# CPUs 2-7), 1B prefill 512 A/B (main's bench_model_forward vs this branch's, alternating, 2 cores;
# this branch with 16 threads, amx_bf16 vs oneDNN above 64 rows), bench/spec A/B of the amx_bf16
# row threshold (9 = main's policy vs this branch's default), greedy texts plain vs draft vs n-gram,
# llama.cpp pp512 on the same weights (converted in the background on CPUs 8-15). ~100-150 s.
# The bundle and the three calls: mkbundle.sh (libdnnl part), mkbundle2.sh (the other two).
set -u
TREE=$PWD; B=/tmp/x2; export LD_LIBRARY_PATH=$B/lib:$B/llama
R=/tmp/x2r2; M=/tmp/x2m; rm -rf $R; mkdir -p $R $M
T="taskset -c 0,1 env SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2"
[ -e /work/wt-xeon ] || { mkdir -p /work && ln -s "$PWD" /work/wt-xeon; }
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)"; cat /proc/loadavg
  for b in $B/new/* $B/old/* $B/tests/*; do echo "$b $(sha1sum < $b | cut -c1-12)"; done
  ldd $B/new/spindle $B/llama/llama-bench $B/llama/libllama-common.so.0 | grep "not found"
  $B/new/make_bench_model $M/llama1b | tail -1; date -u; } > $R/env.txt 2>&1
(cd $R && PYTHONPATH=$B/gguf-py taskset -c 8-15 python3 $TREE/bench/cpu_peer/st_to_gguf.py $M/llama1b $M/llama1b.gguf --write-tokenizer > $R/gguf.txt 2>&1) &
gg=$!
(for t in linear_test ops_test golden_bf16_activations_test; do taskset -c 2-7 $B/tests/$t > $R/test-$t.txt 2>&1; echo "$t rc=$?" >> $R/tests-rc.txt; done) &
tp=$!
run() { local name=$1; shift; echo "== $name ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"; "$@" > $R/$name.txt 2>&1; grep -E "^prefill|oneDNN matmul bf16|error" $R/$name.txt; }
P="--model $M/llama1b --prompt 512"
run pf-old-1 $T $B/old/bench_model_forward $P --context 512 --steps 1
run pf-new-1 $T $B/new/bench_model_forward $P --decode 0
run pf-new-2 $T $B/new/bench_model_forward $P --decode 0
run pf-old-2 $T $B/old/bench_model_forward $P --context 512 --steps 1
run pf16-new env SPINDLE_NUM_THREADS=16 OMP_NUM_THREADS=16 $B/new/bench_model_forward $P --decode 0
run pf16-onednn env SPINDLE_NUM_THREADS=16 OMP_NUM_THREADS=16 SPINDLE_LINEAR_BF16_LARGE=onednn $B/new/bench_model_forward $P --decode 0
printf '#!/bin/bash\nexec taskset -c 0,1 %s "$@"\n' $B/new/spindle > $B/spindle2; chmod +x $B/spindle2
wait $tp; cat $R/tests-rc.txt; for t in linear_test ops_test golden_bf16_activations_test; do grep -E "PASSED|FAILED|worst" $R/test-$t.txt | head -6; done
for v in 9 default; do
  echo "== spec min_rows $v ($(date -u +%T))"
  envv=""; [ $v = 9 ] && envv="SPINDLE_LINEAR_AMX_BF16_MIN_ROWS=9"
  env $envv SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 SPINDLE=$B/spindle2 ROUNDS=1 LEVELS=1 PORT=8321 \
    taskset -c 2-15 timeout 60 bash bench/spec/run.sh $R/spec-v$v > $R/spec-v$v.log 2>&1
  tail -3 $R/spec-v$v/summary.md
done
. bench/lib.sh
for mode in plain draft ngram; do  # greedy texts, this branch's default policy: is speculation lossless here?
  extra=""; [ $mode = draft ] && extra="--speculative-algorithm draft --speculative-draft-model-path models/kjv-draft"
  [ $mode = ngram ] && extra="--speculative-algorithm ngram"
  SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 $B/spindle2 serve models/kjv-tiny --port 8322 $extra > $R/texts-serve-$mode.log 2>&1 &
  pid=$!
  if wait_healthy 8322 $pid 60 $R/texts-serve-$mode.log; then
    for set in kjv repeating; do taskset -c 2-15 python3 /tmp/x2/spec_texts.py 8322 $mode $set 64 >> $R/texts.jsonl; done
  fi
  kill $pid; wait $pid 2>/dev/null
done
python3 - $R/texts.jsonl <<'PY'
import json, sys
rows = {(r["label"], r["set"]): r["texts"] for r in map(json.loads, open(sys.argv[1]))}
for (label, s), t in sorted(rows.items()):
    if label != "plain" and ("plain", s) in rows:
        print(f"{label} vs plain, {s}: {sum(a == b for a, b in zip(t, rows[('plain', s)]))}/{len(t)} greedy texts identical")
PY
wait $gg; echo "gguf rc=$?"; tail -1 $R/gguf.txt
echo "== llama pp512 ($(date -u +%T))"
$T $B/llama/llama-bench -m $M/llama1b.gguf -t 2 -p 512 -n 0 -r 1 -o json > $R/llama-pp512.json 2> $R/llama-pp512.err
grep -E '"avg_ts"|"model_type"' $R/llama-pp512.json; grep -E "load_backend|error" $R/llama-pp512.err | head -3
date -u
tar -C $R -czf $OUT/run2.tar.gz .
