#!/usr/bin/env bash
# Data-parallel serving benchmark on the embedded model (issue 17): the real `spindle serve` on
# loopback, the load generator (loadgen.mjs), closed loop at C=16.
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
  timeout 900 node bench/serving/loadgen.mjs --url "http://127.0.0.1:$port" --model kjv-tiny --concurrency 16 \
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
node -e "
const fs = require('fs'), dir = process.argv[1], reps = Number(process.argv[2]);
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const row = (name) => {
  const runs = Array.from({ length: reps }, (_, i) => JSON.parse(fs.readFileSync(dir + '/' + name + '-' + (i + 1) + '.json')));
  const tok = runs.map((r) => r.output_tok_s), ttft = runs.map((r) => r.ttft_ms.p50), hit = runs.map((r) => r.cache ? 100 * r.cache.prefix_hit_ratio : 0);
  console.log('| ' + name + ' | ' + tok.map((x) => x.toFixed(1)).join(', ') + ' | ' + med(tok).toFixed(1) + ' | ' +
              ttft.map((x) => x.toFixed(0)).join(', ') + ' | ' + med(ttft).toFixed(0) + ' | ' + hit.map((x) => x.toFixed(1)).join(', ') + ' |');
  return med(tok);
};
console.log('| config | output tok/s | median | TTFT p50 ms | median | prefix hit % |');
console.log('| --- | --- | --- | --- | --- | --- |');
const have = (n) => fs.existsSync(dir + '/' + n + '-1.json');
const m = {};
for (const n of ['dp1-t2', 'dp2-t1', 'dp2-rr', 'dp2-pca']) if (have(n)) m[n] = row(n);
if (m['dp1-t2'] && m['dp2-t1']) console.log('dp2 over dp1 output tok/s (medians): ' + (m['dp2-t1'] / m['dp1-t2']).toFixed(2) + 'x');
if (m['dp2-rr'] && m['dp2-pca']) console.log('prefix_cache_aware over round_robin output tok/s (medians): ' + (m['dp2-pca'] / m['dp2-rr']).toFixed(2) + 'x');
" "$out" "$repeats" | tee -a "$log"
