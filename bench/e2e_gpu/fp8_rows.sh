#!/usr/bin/env bash
# bench/e2e_gpu/fp8_rows.sh: issue 47's FP8 rows on the GPU host, in one command (ratios only within
# it). Measures the ceilings (copy bandwidth, bf16 and FP8 GEMM rates), writes the 8B-shape random
# folder as bf16 (make_model.py), then serves, one after the other with the same load:
#   bf16       the bf16 folder (the baseline of every ratio)
#   block128   the same weights as a quant_method "fp8" 128x128-block checkpoint (make_model.py --fp8 block128)
#   channel    the same weights as a compressed-tensors per-channel checkpoint (--fp8 channel)
#   quantize   the bf16 folder with --quantization fp8 (per-channel at load)
#   kvfp8      the bf16 folder with --kv-cache-dtype fp8_e4m3
# Each: streaming completions of 512-token prompts and 128 output tokens at C = $LEVELS (default 1,32),
# then one 8000-token prefill (1 output token). fp8_summary.py prints each row against its decode
# bound (copy bandwidth / the bytes one decode step reads: layer weights and scales, lm_head; not the
# embedding) and against bf16.
#
#   SPINDLE=.bundle/bin/spindle RESULTS=/tmp/fp8-out ROWS="bf16 block128 quantize" bash bench/e2e_gpu/fp8_rows.sh
# SERVE_ARGS: flags added to every row's serve (e.g. --fp8-prefill-kernel auto).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
spindle=${SPINDLE:-build/bin/spindle}
results=${RESULTS:-/tmp/fp8-out}
work=${WORK:-/tmp/fp8-work}
rows=${ROWS:-bf16 block128 channel quantize}
levels=${LEVELS:-1,32}
shape=${SHAPE:-8b}
port=${PORT:-8200}
mkdir -p "$results" "$work"
say() { echo "== $(date +%T) $*"; }

say ceilings
FP8=1 python3 "$here/ceilings.py" | tee "$results/ceilings.json"

model_dir() {  # model_dir ROW: the folder the row serves, written on first use
  local kind=bf16
  [[ $1 == block128 || $1 == channel ]] && kind=$1
  if [[ ! -f $work/$kind/model.safetensors ]]; then
    say "model $kind ($shape)" >&2
    local fp8=()
    [[ $kind != bf16 ]] && fp8=(--fp8 "$kind")
    python3 "$here/make_model.py" "$work/$kind" --shape "$shape" "${fp8[@]}" >"$results/model-$kind.json"
  fi
  echo "$work/$kind"
}

serve_row() {  # serve_row ROW FLAGS...
  local row=$1; shift
  local dir
  dir=$(model_dir "$row")
  python3 "$here/fp8_summary.py" --bytes "$dir" "$row" >"$results/bytes-$row.json"
  say "serve $row $*"
  # shellcheck disable=SC2086
  "$spindle" serve "$dir" --device cuda:0 --port "$port" --max-model-len 8448 ${SERVE_ARGS:-} "$@" >"$results/serve-$row.txt" 2>&1 &
  local pid=$!
  for _ in $(seq 1 400); do curl -sf "localhost:$port/health" >/dev/null 2>&1 && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
  grep -E "KV plan|linear|fp8|FP8|error" "$results/serve-$row.txt" | cut -c1-300 | head -16
  local vocab
  vocab=$(python3 -c "import json; print(json.load(open('$dir/config.json'))['vocab_size'])")
  timeout 300 python3 "$here/../loadgen.py" --port "$port" --levels "$levels" --vocab "$vocab" --warmup \
    --prompt-tokens 512 --output-tokens 128 --label "$row" --json "$results/decode-$row.json"
  timeout 120 python3 "$here/../loadgen.py" --port "$port" --levels 1 --prompt-tokens 8000 --output-tokens 1 \
    --requests-per-level 2 --vocab "$vocab" --label "$row-prefill8k" --json "$results/prefill-$row.json"
  kill $pid; wait $pid 2>/dev/null
}

for row in $rows; do
  case $row in
    bf16|block128|channel) serve_row "$row" ;;
    quantize) serve_row quantize --quantization fp8 ;;
    kvfp8) serve_row kvfp8 --kv-cache-dtype fp8_e4m3 ;;
    *) echo "unknown row $row" >&2 ;;
  esac
done
say summary
python3 "$here/fp8_summary.py" "$results" | tee "$results/summary.md"
