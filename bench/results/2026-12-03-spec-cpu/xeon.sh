#!/bin/bash
# Xeon run for branch spec-cpu (NOT RUN by its author: the device tool was not lent to that
# session). Run from the repository root of this branch on the H200 host, after
#   scripts/bundle.sh                      # this branch's build -> .bundle/ (bin/spindle, bin/bench_spec_verify)
#   SPINDLE_BUILD_DIR=build-main scripts/bundle.sh .bundle-main   # optional: main's build, for an A/B
# and optionally cp build/tests/kernels/linear_test .bundle/bin/ (bundle.sh does not take it).
# Pinned as bench/results/2026-12-02-xeon-cpu-2/run2.sh pins: the measured process on CPUs 0-1
# with SPINDLE_NUM_THREADS=2, the Python client on 2-15. Results under $OUT (or /tmp/spec-cpu-xeon).
set -u
NEW=${NEW:-.bundle}; OLD=${OLD:-.bundle-main}
R=${OUT:-/tmp/spec-cpu-xeon}; mkdir -p $R
T="taskset -c 0,1 env SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2"
{ date -u; lscpu | grep -E "Model name|^CPU\(s\)"; cat /proc/loadavg; git rev-parse HEAD
  for b in $NEW/bin/* $OLD/bin/*; do [ -f "$b" ] && echo "$b $(sha1sum < $b | cut -c1-12)"; done; } > $R/env.txt 2>&1
[ -x $NEW/bin/linear_test ] && { $T $NEW/bin/linear_test > $R/linear_test.txt 2>&1; echo "linear_test rc=$?"; tail -3 $R/linear_test.txt; }
sides="new"; [ -x $OLD/bin/bench_spec_verify ] && sides="old new"
for rep in 1 2; do
  for side in $sides; do
    dir=$NEW; [ $side = old ] && dir=$OLD
    for backend in cpu_amx cpu_avx512; do
      for k in 1 2 4; do
        $T $dir/bin/bench_spec_verify --model models/kjv-tiny --backend $backend --context 200 --k $k --steps 80 \
          >> $R/verify-$side.jsonl 2>> $R/verify-$side.err
        tail -1 $R/verify-$side.jsonl | python3 -c "import json,sys; d=json.load(sys.stdin); print('$side rep$rep', d['prefill_backend'], d['linear'], 'k', d['k'], 'decode %.3f verify %.3f ratio %.3f' % (d['decode_ms'], d['verify_ms'], d['verify_over_decode']))"
      done
    done
  done
done
for side in $sides; do
  dir=$NEW; [ $side = old ] && dir=$OLD
  printf '#!/bin/bash\nexec taskset -c 0,1 %s "$@"\n' "$(realpath $dir/bin/spindle)" > $R/spindle-$side; chmod +x $R/spindle-$side
done
for turn in 1 2; do
  for side in $sides; do
    echo "== bench/spec $side turn $turn ($(date -u +%T))"
    SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 SPINDLE=$R/spindle-$side ROUNDS=3 LEVELS=1 PORT=8321 \
      taskset -c 2-15 bash bench/spec/run.sh $R/spec-$side-t$turn > $R/spec-$side-t$turn.log 2>&1
    tail -3 $R/spec-$side-t$turn/summary.md
  done
done
date -u
[ -n "${OUT:-}" ] && tar -C $R -czf $OUT/spec-cpu-xeon.tar.gz --exclude='*.tar.gz' .
