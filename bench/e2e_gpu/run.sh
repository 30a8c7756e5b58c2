#!/usr/bin/env bash
# bench/e2e_gpu: the real server on the GPU host against the bandwidth bound and HF transformers,
# in one command. Writes a random-weight HF folder (make_model.py, the Llama-3.1-8B shape by
# default), measures the GPU's ceilings (ceilings.py), serves the folder with `spindle serve
# --device cuda:0` and drives it with bench/loadgen.py (streaming completions, 512-token random prompts,
# 128 output tokens, ignore_eos, C = 1 8 32 64 128; then 8000-token prompts, 1 output token, at
# C = 1 and 16 for prefill; then C = 128 with 128-token prompts and 256 output tokens, the load of
# issue 14's C=128 row), then runs hf_peer.py (generate() with a static cache, batch 1 and 32)
# on the same folder. Prints a table with the ratios; everything lands in $RESULTS.
#
#   SPINDLE=.bundle/bin/spindle RESULTS=/tmp/e2e-out bash bench/e2e_gpu/run.sh
# Knobs: SHAPE (8b|1b|tiny), LEVELS, SERVE_ARGS (extra serve flags), EAGER=1 (also a run with
# --disable-cuda-graph), AB="label:flags;label:flags" (also a run per entry with those serve flags,
# at AB_LEVELS, default 1,32,128, no 8k prefill; e.g. AB="overlap:--enable-overlap-schedule"; words
# NAME=VALUE among the flags go to the server's environment: AB="c128:SPINDLE_FLASH_DECODE_MIN_CHUNK=128"),
# SKIP_HF=1, SKIP_PREFILL=1, SKIP_SHORT=1, PORT.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
spindle=${SPINDLE:-build/bin/spindle}
results=${RESULTS:-/tmp/e2e-out}
work=${WORK:-/tmp/e2e-work}
shape=${SHAPE:-8b}
levels=${LEVELS:-1,8,32,64,128}
port=${PORT:-8200}
mkdir -p "$results" "$work"
say() { echo "== $(date +%T) $*"; }

say ceilings
python3 "$here/ceilings.py" | tee "$results/ceilings.json"
say "model ($shape)"
if [[ -f $work/model/model.safetensors ]]; then  # written by an earlier step: its weight bytes from the file
  python3 -c 'import json, os, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.dumps({"dir": os.path.dirname(sys.argv[1]), "weight_bytes": os.path.getsize(sys.argv[1]) - 8 - n}))' \
    "$work/model/model.safetensors" | tee "$results/model.json"
else
  python3 "$here/make_model.py" "$work/model" --shape "$shape" | tee "$results/model.json"
fi
vocab=$(python3 -c "import json; print(json.load(open('$work/model/config.json'))['vocab_size'])")

serve_and_load() {  # serve_and_load LABEL EXTRA_FLAGS... (NAME=VALUE words: the server's environment)
  local label=$1; shift
  local envs=() flags=()
  for word in "$@"; do
    if [[ $word =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$word"); else flags+=("$word"); fi
  done
  set -- "${flags[@]}"
  say "serve $label ${envs[*]}"
  env "${envs[@]}" "$spindle" serve "$work/model" --device cuda:0 --port "$port" --max-model-len 8448 ${SERVE_ARGS:-} "$@" \
    >"$results/serve-$label.txt" 2>&1 &
  local pid=$!
  for _ in $(seq 1 400); do curl -sf "localhost:$port/health" >/dev/null 2>&1 && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
  grep -E "KV plan|attention:|CUDA graphs|linear kernel|error" "$results/serve-$label.txt" | head -8
  timeout 400 python3 "$here/../loadgen.py" --port "$port" --levels "${run_levels:-$levels}" --vocab "$vocab" --warmup \
    --prompt-tokens 512 --output-tokens 128 --label "$label" --json "$results/spindle-$label.json"
  if [[ -z ${SKIP_PREFILL:-} && -z ${run_levels:-} ]]; then
    timeout 200 python3 "$here/../loadgen.py" --port "$port" --levels 1,16 --prompt-tokens 8000 --output-tokens 1 \
      --requests-per-level 1 --vocab "$vocab" --label "$label-prefill8k" --json "$results/prefill-$label.json"
  fi
  if [[ -z ${SKIP_SHORT:-} && -z ${run_levels:-} ]]; then  # the issue's C=128 row: 128-token prompts, 256 output tokens
    timeout 200 python3 "$here/../loadgen.py" --port "$port" --levels 128 --prompt-tokens 128 --output-tokens 256 --warmup \
      --vocab "$vocab" --label "$label-short" --json "$results/short-$label.json"
  fi
  curl -s "localhost:$port/metrics" >"$results/metrics-$label.txt"
  kill $pid; wait $pid 2>/dev/null
}
serve_and_load graphs
[[ -n ${EAGER:-} ]] && serve_and_load eager --disable-cuda-graph
if [[ -n ${AB:-} ]]; then  # the same model and load with other serve flags, right after
  IFS=';' read -ra ab_runs <<<"$AB"
  for entry in "${ab_runs[@]}"; do
    # shellcheck disable=SC2086
    run_levels=${AB_LEVELS:-1,32,128} serve_and_load "${entry%%:*}" ${entry#*:}
  done
fi

if [[ -z ${SKIP_HF:-} ]]; then
  say "hf peer"
  timeout 300 python3 "$here/hf_peer.py" "$work/model" | tee "$results/hf.jsonl"
fi
say summary
python3 "$here/summary.py" "$results" | tee "$results/summary.md"
