#!/usr/bin/env bash
# bench/e2e_gpu/structured_rows.sh: issue 44's GPU row, in one command: what a JSON Schema
# constraint costs a served request on the 8B shape (make_model.py's random bf16 folder, its
# byte-level vocabulary of 128,256 tokens), at C = $LEVELS (default 1,32).
#
# One server; plain and constrained runs alternate $ROUNDS times (plain-1, json-1, plain-2, ...),
# the same prompts each time (512 random token ids, the prefix cache off so no run reads another's
# prompts), 128 output tokens each (ignore_eos). The constraint is the CPU rows' constraint.json
# (an array of at least 40 {verse, word} objects: no document can end inside 128 tokens, so both
# arms produce exactly 128 tokens a request), sent as vLLM's guided_json. loadgen records each
# level's tok/s and the engine's per-step parts (spindle_step_seconds_total), so the summary gives
# both the wall-clock ratio and what the constraint adds to a decode step.
#
#   SPINDLE=.bundle/bin/spindle RESULTS=/tmp/structured-out bash bench/e2e_gpu/structured_rows.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
spindle=${SPINDLE:-build/bin/spindle}
results=${RESULTS:-/tmp/structured-out}
work=${WORK:-/tmp/e2e-work}  # run.sh's folder: one 8B model serves both
levels=${LEVELS:-1,32}
rounds=${ROUNDS:-3}
shape=${SHAPE:-8b}
port=${PORT:-8210}
constraint=${CONSTRAINT:-$here/../results/2026-12-07-structured-output-devvm/constraint.json}
mkdir -p "$results" "$work"
say() { echo "== $(date +%T) $*"; }

dir=$work/model
if [[ ! -f $dir/model.safetensors ]]; then
  say "model bf16 ($shape)"
  python3 "$here/make_model.py" "$dir" --shape "$shape" >"$results/model.json" || exit 1
fi
vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")

say serve
"$spindle" serve "$dir" --device cuda:0 --port "$port" --max-model-len 4096 --disable-prefix-cache \
  >"$results/serve.txt" 2>&1 &
pid=$!
for _ in $(seq 1 400); do curl -sf "localhost:$port/health" >/dev/null 2>&1 && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
curl -sf "localhost:$port/health" >/dev/null || { echo "server did not start"; tail -20 "$results/serve.txt"; exit 1; }

for r in $(seq 1 "$rounds"); do
  for arm in plain json; do
    extra=()
    [[ $arm == json ]] && extra=(--extra-body "$(cat "$constraint")")
    say "$arm-$r"
    timeout 300 python3 "$here/../loadgen.py" --port "$port" --levels "$levels" --vocab "$vocab" --warmup \
      --prompt-tokens 512 --output-tokens 128 --label "$arm-$r" --jsonl "$results/structured.jsonl" "${extra[@]}" \
      | tail -4
  done
done
kill $pid; wait $pid 2>/dev/null
say summary
python3 "$here/structured_summary.py" "$results/structured.jsonl" | tee "$results/summary.md"
