#!/usr/bin/env bash
# Data-parallel serving benchmark on the embedded model (issue 17): the real `spindle serve` on
# loopback, the load generator (bench/loadgen.py), closed loop at C=16.
#   1. dp 1 with 2 kernel threads against dp 2 with 1 thread each (pinned to its own core):
#      distinct random prompts (no prefix-cache help).
#   2. dp 2, round_robin against prefix_cache_aware, on groups of requests sharing long prefixes
#      (PREFIX_GROUPS random prefixes of PREFIX tokens, each request its own SUFFIX tokens after one):
#      output tok/s, TTFT, the prefix-cache hit ratio and the router's decisions.
# Each configuration runs REPEATS times, alternating, each time on a fresh server. Writes the logs
# and JSON under OUT_DIR (default bench/results/dp-serving-DATE).
#
#   bench/serving/dp.sh [OUT_DIR]
#   CONFIGS="dp2-rr dp2-pca" PCA_ARGS="--router-balance-abs-threshold 8192" bench/serving/dp.sh OUT
#     (CONFIGS: which of dp1-t2 dp2-t1 dp2-rr dp2-pca run; PCA_ARGS: more flags for dp2-pca)
#   SPINDLE=build/bin/spindle REPEATS=3 N=64 PROMPT=128 OUTPUT=64 PREFIX=384 SUFFIX=32 PREFIX_GROUPS=8 bench/serving/dp.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
spindle=${SPINDLE:-build/bin/spindle}
out=${1:-bench/results/dp-serving-$(date -u +%F)}
port=${PORT:-8297}
repeats=${REPEATS:-3}
n=${N:-64}
prompt=${PROMPT:-128}
output=${OUTPUT:-64}
prefix=${PREFIX:-384}
suffix=${SUFFIX:-32}
groups=${PREFIX_GROUPS:-8}  # not GROUPS: bash sets that to the group ids
pout=${PREFIX_OUTPUT:-32}
configs=${CONFIGS:-dp1-t2 dp2-t1 dp2-rr dp2-pca}
mkdir -p "$out"
log="$out/dp.log"
{
  echo "date $(date -u +%FT%TZ); host $(uname -n); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); command: REPEATS=$repeats N=$n PROMPT=$prompt OUTPUT=$output PREFIX=$prefix SUFFIX=$suffix PREFIX_GROUPS=$groups PREFIX_OUTPUT=$pout CONFIGS='$configs' PCA_ARGS='${PCA_ARGS:-}' bench/serving/dp.sh $*"
} | tee "$log"
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" models/kjv-tiny/config.json)
pid=
stop() { if [[ -n $pid ]]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; pid=; fi; }
trap stop EXIT
start() {  # start NAME ARGS...: a fresh server
  local name=$1; shift
  "$spindle" serve --port "$port" --max-total-tokens 16384 "$@" >"$out/serve-$name.log" 2>&1 &
  pid=$!
  wait_healthy "$port" "$pid" 60 "$out/serve-$name.log" || exit 1
}
gen() {  # gen JSON ARGS...
  local json=$1; shift
  timeout 900 python3 bench/loadgen.py --url "http://127.0.0.1:$port" --model kjv-tiny --concurrency 16 \
    --requests "$n" --vocab "$vocab" --json "$json" "$@"
}
run() {  # run NAME REPEAT WORKLOAD SERVE_ARGS...
  local name=$1 rep=$2 workload=$3; shift 3
  start "$name-$rep" "$@"
  local wl=(--prompt-tokens "$prompt" --output-tokens "$output" --seed 7)
  [[ $workload == prefix ]] && wl=(--prompt-tokens "$suffix" --prefix-tokens "$prefix" --groups "$groups" --output-tokens "$pout" --seed 11)
  # Warm-up (not reported) with other prompts and prefixes (seed 1000 + rep) than the run's (seed rep).
  wl[-1]=$((1000 + rep))
  gen /dev/null "${wl[@]}" --requests 4 >/dev/null
  echo "== $name (run $rep): spindle serve $*" | tee -a "$log"
  wl[-1]=$rep
  gen "$out/$name-$rep.json" "${wl[@]}" | tee -a "$log"
  stop
}
want() { [[ " $configs " == *" $1 "* ]]; }
for rep in $(seq 1 "$repeats"); do
  want dp1-t2 && run dp1-t2 "$rep" distinct --dp-size 1 --threads 2
  want dp2-t1 && run dp2-t1 "$rep" distinct --dp-size 2
  want dp2-rr && run dp2-rr "$rep" prefix --dp-size 2 --load-balance-method round_robin
  # shellcheck disable=SC2086
  want dp2-pca && run dp2-pca "$rep" prefix --dp-size 2 --load-balance-method prefix_cache_aware ${PCA_ARGS:-}
done
python3 - "$out" "$repeats" <<'PY' | tee -a "$log"
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def row(name):
    runs = [json.load(open(f"{out}/{name}-{i + 1}.json"))[0] for i in range(reps)]
    tok = [r["output_tok_s"] for r in runs]
    ttft = [r["ttft_ms"]["p50"] for r in runs]
    hit = [100 * r["cache"]["prefix_hit_ratio"] if r["cache"] else 0 for r in runs]
    print(f"| {name} | {', '.join(f'{x:.1f}' for x in tok)} | {statistics.median_high(tok):.1f} | "
          f"{', '.join(f'{x:.0f}' for x in ttft)} | {statistics.median_high(ttft):.0f} | {', '.join(f'{x:.1f}' for x in hit)} |")
    return statistics.median_high(tok)
print("| config | output tok/s | median | TTFT p50 ms | median | prefix hit % |")
print("| --- | --- | --- | --- | --- | --- |")
m = {n: row(n) for n in ("dp1-t2", "dp2-t1", "dp2-rr", "dp2-pca") if os.path.exists(f"{out}/{n}-1.json")}
if "dp1-t2" in m and "dp2-t1" in m:
    print(f"dp2 over dp1 output tok/s (medians): {m['dp2-t1'] / m['dp1-t2']:.2f}x")
if "dp2-rr" in m and "dp2-pca" in m:
    print(f"prefix_cache_aware over round_robin output tok/s (medians): {m['dp2-pca'] / m['dp2-rr']:.2f}x")
PY
