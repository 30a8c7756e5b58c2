#!/usr/bin/env bash
# Batch-1 decode of a mixture-of-experts GGUF file on the CPU, Spindle and llama.cpp on the same
# file, against the bytes of the active experts a token reads (issue 48, CPU bench at reduced depth):
# bench/results/2026-12-07-devvm-moe-decode/README.md says what each row is.
#
#   bench/cpu_peer/moe_decode.sh models       $MODELS/a3b-${LAYERS}l: the Qwen3-30B-A3B layer shape
#                                             (hidden 2048, 128 experts of width 768, top 8, 32/4
#                                             heads of 128) at $LAYERS layers (default 4) with a
#                                             32768 vocabulary, random bf16 weights
#                                             (make_moe_model.py), as BF16 GGUF (st_to_gguf.py) and
#                                             llama-quantize's Q4_K_M and Q8_0 of it
#   bench/cpu_peer/moe_decode.sh bench OUT    per file REPS times (default 2): Spindle's
#                                             bench_model_forward (batch 1 and 16 with 512 cached
#                                             tokens, its read-bandwidth bound counting top_k experts
#                                             per layer at batch 1), then llama-bench tg32 at depth
#                                             512; moe_active_bytes.py's per-token bytes
#
# Environment: LLAMA_CPP (a llama.cpp tree with build/bin/llama-bench and llama-quantize), MODELS
# (default /work/peer/models/moe-bench), LAYERS (4), THREADS (2), REPS (2), BUILD (build), TYPES
# (default "q4_k_m q8_0").
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
MODELS=${MODELS:-/work/peer/models/moe-bench}
LAYERS=${LAYERS:-4}
THREADS=${THREADS:-2}
REPS=${REPS:-2}
BUILD=${BUILD:-build}
TYPES=${TYPES:-q4_k_m q8_0}
PY=${PYTHON:-/usr/bin/python3}  # needs numpy (Debian's python3-numpy)
LB=$LLAMA_CPP/build/bin
M=$MODELS/a3b-${LAYERS}l
export PYTHONPATH=$LLAMA_CPP/gguf-py SPINDLE_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS

make_models() {
  mkdir -p "$MODELS"
  $PY bench/cpu_peer/make_moe_model.py "$M" --layers "$LAYERS" --hidden 2048 --experts 128 --top-k 8 \
    --expert-width 768 --heads 32 --kv-heads 4 --head-dim 128 --vocab 32768 --router-scale 1
  $PY bench/cpu_peer/st_to_gguf.py "$M" "$M-bf16.gguf" --write-tokenizer
  for t in $TYPES; do
    "$LB/llama-quantize" "$M-bf16.gguf" "$M-$t.gguf" "${t^^}" "$THREADS" >"$M-$t.log" 2>&1
  done
}

bench() {
  local out=$1
  mkdir -p "$out"
  echo "date $(date -u +%FT%TZ); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); spindle $(git rev-parse --short HEAD)" \
    | tee "$out/bench.txt"
  for t in $TYPES; do
    $PY bench/cpu_peer/moe_active_bytes.py "$M-$t.gguf" | tee -a "$out/bench.txt"
    for r in $(seq 1 "$REPS"); do
      "$BUILD/bench/bench_model_forward" --model "$M-$t.gguf" --context 512 --prompt 64 --steps 16 \
        >"$out/$t-spindle-$r.txt" 2>&1
      grep -E "^decode batch|bound from bandwidth|memory read bandwidth now" "$out/$t-spindle-$r.txt" \
        | sed "s/^/spindle $t rep $r: /" | tee -a "$out/bench.txt"
      "$LB/llama-bench" -m "$M-$t.gguf" -t "$THREADS" -p 0 -n 32 -d 512 -r 1 -o json \
        >"$out/$t-llama-$r.json" 2>"$out/$t-llama-$r.err"
      $PY -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; print("llama.cpp %s rep %s: tg32 @ d512 %.2f tok/s" % (sys.argv[2], sys.argv[3], r["avg_ts"]))' \
        "$out/$t-llama-$r.json" "$t" "$r" | tee -a "$out/bench.txt"
    done
  done
}

case "${1:-}" in
  models) make_models ;;
  bench) bench "${2:?OUT directory}" ;;
  *) echo "usage: $0 models | bench OUT"; exit 2 ;;
esac
