#!/usr/bin/env bash
# Resident memory of the real `spindle serve` (embedded model unless MODEL is set) over N requests
# with distinct prompts (bench/loadgen.py: random token ids, so every request inserts new
# pages into the prefix cache), against the bound the KV plan states ("resident at most N bytes" in
# serve's KV plan log line: weights + workspace + reserve + KV pool).
#
#   bench/kv_resident.sh [OUT_DIR]
#   N=10000 C=16 PROMPT=64 OUTPUT=16 SERVE_ARGS="--threads 2" bench/kv_resident.sh
#
# Writes OUT_DIR/serve.log, OUT_DIR/rss.tsv (every 2 s: seconds, VmRSS, VmHWM in KiB, KV pages
# used (in use or cached) and in use from /metrics) and OUT_DIR/summary.txt; exits 1 when the
# peak (VmHWM) is above the bound.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
spindle=${SPINDLE:-build/bin/spindle}
out=${1:-bench/results/kv-resident-$(date -u +%F)}
port=${PORT:-8199}
n=${N:-10000}
c=${C:-16}
prompt=${PROMPT:-64}
output=${OUTPUT:-16}
mkdir -p "$out"
summary="$out/summary.txt"
{
  echo "date $(date -u +%FT%TZ); host $(uname -n); $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "memory: $(grep MemTotal /proc/meminfo | tr -s ' ')"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "command: N=$n C=$c PROMPT=$prompt OUTPUT=$output SERVE_ARGS='${SERVE_ARGS:-}' bench/kv_resident.sh $*"
} | tee "$summary"
# shellcheck disable=SC2086
"$spindle" serve ${MODEL:-} --port "$port" ${SERVE_ARGS:-} >"$out/serve.log" 2>&1 &
pid=$!
sampler=""
trap 'kill $pid 2>/dev/null; [ -n "$sampler" ] && kill $sampler 2>/dev/null; wait 2>/dev/null' EXIT
wait_healthy "$port" "$pid" 300 "$out/serve.log" || exit 1
bound=$(sed -n 's/.*resident at most \([0-9]*\) bytes.*/\1/p' "$out/serve.log" | head -1)
[ -n "$bound" ] || { echo "no 'resident at most' in the KV plan log line"; grep 'KV plan' "$out/serve.log"; exit 1; }
grep 'KV plan' "$out/serve.log" | sed 's/^.*KV plan/KV plan/' | tee -a "$summary"
model=$(curl -s "localhost:$port/v1/models" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" \
        "${MODEL:-models/kjv-tiny}/config.json" 2>/dev/null || echo 4096)

metric() { curl -s "localhost:$port/metrics" | sed -n "s/^$1 \([0-9.e+]*\)$/\1/p" | head -1; }
sample() {
  local t0=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    local rss hwm
    rss=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
    hwm=$(sed -n 's/^VmHWM:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
    printf '%s\t%s\t%s\t%s\t%s\n' "$((SECONDS - t0))" "$rss" "$hwm" "$(metric spindle_kv_pages_used)" \
      "$(metric spindle_kv_pages_in_use)" >>"$out/rss.tsv"
    sleep 2
  done
}
printf 'seconds\tvm_rss_kib\tvm_hwm_kib\tkv_pages_used\tkv_pages_in_use\n' >"$out/rss.tsv"
start_rss=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
sample &
sampler=$!
python3 bench/loadgen.py --url "http://127.0.0.1:$port" --model "$model" --concurrency "$c" \
  --requests "$n" --prompt-tokens "$prompt" --output-tokens "$output" --vocab "$vocab" --seed 7 \
  --json "$out/loadgen.json" | tee -a "$summary"
sleep 3  # one more sample after the last request
end_rss=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
hwm=$(sed -n 's/^VmHWM:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
max_rss=$(awk -F'\t' 'NR > 1 && $2 > m { m = $2 } END { print m }' "$out/rss.tsv")
{
  echo "KV pages used / in use at the end: $(metric spindle_kv_pages_used) / $(metric spindle_kv_pages_in_use) of $(metric spindle_kv_pages_total)"
  echo "VmRSS after start $((start_rss / 1024)) MiB, largest sample $((max_rss / 1024)) MiB, at the end $((end_rss / 1024)) MiB"
  echo "VmHWM (peak) $((hwm / 1024)) MiB = $((hwm * 1024)) bytes; the plan's bound $((bound / 1048576)) MiB = $bound bytes"
} | tee -a "$summary"
if [ $((hwm * 1024)) -le "$bound" ]; then
  echo "PASS: peak resident memory within the plan's bound ($(awk "BEGIN { printf \"%.3f\", $hwm * 1024 / $bound }") of it)" | tee -a "$summary"
else
  echo "FAIL: peak resident memory above the plan's bound" | tee -a "$summary"
  exit 1
fi
