#!/usr/bin/env bash
# The serving benchmark: the real `spindle serve` on loopback with the embedded model, the load
# generator (bench/loadgen.py) at C=1 and C=16, and C=16 over C=1. Writes the log and JSON under
# OUT_DIR (default bench/results/serving-DATE).
#
#   bench/serving/run.sh [OUT_DIR]
#   SPINDLE=build/bin/spindle PROMPT=128 OUTPUT=64 N1=16 N16=64 bench/serving/run.sh
#   SERVE_ARGS="--threads 2" bench/serving/run.sh        extra flags for spindle serve
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
spindle=${SPINDLE:-build/bin/spindle}
out=${1:-bench/results/serving-$(date -u +%F)}
port=${PORT:-8197}
prompt=${PROMPT:-128}
output=${OUTPUT:-64}
mkdir -p "$out"
log="$out/serving.log"
{
  bench_header "bench/serving/run.sh $*"
} | tee "$log"
# shellcheck disable=SC2086
"$spindle" serve --port "$port" ${SERVE_ARGS:-} >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
wait_healthy "$port" "$pid" 120 "$out/serve.log" || exit 1
model=$(curl -s "localhost:$port/v1/models" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" models/kjv-tiny/config.json 2>/dev/null || echo 4096)
_gen() {  # _gen C N [JSON]
  timeout 900 python3 bench/loadgen.py --url "http://127.0.0.1:$port" --model "$model" --concurrency "$1" \
    --requests "$2" --prompt-tokens "$prompt" --output-tokens "$output" --vocab "$vocab" --seed "$1" \
    ${3:+--json "$3"}
}
_gen 1 2 >/dev/null  # warm-up (not reported)
gen() { _gen "$1" "$2" "$out/c$1.json" | tee -a "$log"; }
gen 1 "${N1:-16}"
gen 16 "${N16:-64}"
python3 -c "import json, sys; a, b = (json.load(open(f))[0] for f in sys.argv[1:3])
print(f'C=16 over C=1 output tok/s: {b[\"output_tok_s\"] / a[\"output_tok_s\"]:.2f}x')" "$out/c1.json" "$out/c16.json" | tee -a "$log"
