#!/usr/bin/env bash
# Spindle and llama-server against a float64 forward over the dequantized weights of one GGUF file
# (f64_reference.py): serve both, collect (prompts of --seed SEED), stop them, then the f64
# forwards: exact activations and KV, and each engine's own rounding modelled; then the three-way
# verdict (compare --margin MARGIN: each engine's mean gap to the exact forward within 1.25 x, and
# its largest within MARGIN x, those of its modelled rounding) and the two-way tolerance derived
# from it, MARGIN x the sum of the two models' largest gaps; last, check_logits.py at that
# tolerance on fresh prompts (--seed SEED + 1).
# usage: LLAMA_CPP=<tree> f64_check.sh OUT_DIR GGUF VOCAB [MIN_ID]
# Environment: PORT (llama-server's, Spindle on PORT + 1; default 8491), SPINDLE (default build/bin/spindle), SPINDLE_ARGS (default
# "--linear-kernel int8_avx512_vnni"), LLAMA_ARGS (extra llama-server flags), THREADS (2),
# PROMPTS (8), TOKENS (32), SEED (1), MARGIN (1.5), FRESH (1: the fresh-prompt check), FORWARDS ("exact:f64 spindle:bf16 llama:f16q"), PYTHON
# (/usr/bin/python3, which has numpy), BLAS_DIR (prepended to LD_LIBRARY_PATH for the forwards;
# default Debian's openblas-pthread).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
OUT=${1:?OUT_DIR} GGUF=${2:?GGUF} VOCAB=${3:?VOCAB} MIN_ID=${4:-258}
SPINDLE=${SPINDLE:-build/bin/spindle} SPINDLE_ARGS=${SPINDLE_ARGS:---linear-kernel int8_avx512_vnni}
MARGIN=${MARGIN:-1.5} FRESH=${FRESH:-1} PORT=${PORT:-8491} LLAMA_ARGS=${LLAMA_ARGS:-} THREADS=${THREADS:-2} PROMPTS=${PROMPTS:-8} TOKENS=${TOKENS:-32} SEED=${SEED:-1}
FORWARDS=${FORWARDS:-exact:f64 spindle:bf16 llama:f16q} PYTHON=${PYTHON:-/usr/bin/python3}
BLAS_DIR=${BLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-pthread}
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; PIDS=(); }
trap cleanup EXIT
. bench/lib.sh  # wait_healthy PORT PID SECONDS LOG (curl, or python3 where a host has none)
echo "date $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg); $GGUF ($(sha256sum "$GGUF" | cut -c1-16));" \
  "spindle $(git rev-parse --short HEAD) $SPINDLE_ARGS; llama.cpp $(git -C "$LLAMA_CPP" rev-parse --short HEAD 2>/dev/null) $LLAMA_ARGS" \
  | tee "$OUT/run.txt"
serve() {
  "$LLAMA_CPP/build/bin/llama-server" -m "$GGUF" --port "$PORT" -t "$THREADS" -tb "$THREADS" -c 4096 -np 1 \
    $LLAMA_ARGS >>"$OUT/llama-server.log" 2>&1 &
  PIDS+=($!)
  wait_healthy "$PORT" "${PIDS[-1]}" 600 "$OUT/llama-server.log"
  # shellcheck disable=SC2086
  "$SPINDLE" serve "$GGUF" --port $((PORT + 1)) --threads "$THREADS" $SPINDLE_ARGS >>"$OUT/spindle.log" 2>&1 &
  PIDS+=($!)
  wait_healthy $((PORT + 1)) "${PIDS[-1]}" 600 "$OUT/spindle.log"
}
serve
python3 bench/cpu_peer/f64_reference.py collect --llama "http://127.0.0.1:$PORT" --spindle "http://127.0.0.1:$((PORT + 1))" \
  --vocab "$VOCAB" --min-id "$MIN_ID" --prompts "$PROMPTS" --tokens "$TOKENS" --seed "$SEED" --out "$OUT/collected.json"
cleanup
files=()
for f in $FORWARDS; do  # ACT:KV[q]
  act=${f%%:*} kv=${f#*:} rq=()
  [[ $kv == *q ]] && { kv=${kv%q}; rq=(--round-q); }
  echo "forward act=$act kv=$kv ${rq[*]} (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/run.txt"
  LD_LIBRARY_PATH=$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OPENBLAS_NUM_THREADS=$THREADS \
    "$PYTHON" bench/cpu_peer/f64_reference.py forward --gguf "$GGUF" --collected "$OUT/collected.json" \
    --act "$act" --kv "$kv" "${rq[@]}" --out "$OUT/f64-$act-$kv${rq:+q}.json" 2>>"$OUT/forward.log"
  files+=(--f64 "$OUT/f64-$act-$kv${rq:+q}.json")
done
rc=0
python3 bench/cpu_peer/f64_reference.py compare --collected "$OUT/collected.json" "${files[@]}" --margin "$MARGIN" \
  | tee -a "$OUT/run.txt" || rc=1
tol=$(grep -o '"derived_two_way_tolerance": [0-9.]*' "$OUT/run.txt" | tail -1 | cut -d' ' -f2)
if [[ $FRESH == 1 && -n $tol ]]; then
  echo "check_logits.py on fresh prompts (seed $((SEED + 1))) at the derived tolerance $tol (load $(cut -d' ' -f1-3 /proc/loadavg))" \
    | tee -a "$OUT/run.txt"
  serve
  python3 bench/cpu_peer/check_logits.py --reference "http://127.0.0.1:$PORT" --candidate "http://127.0.0.1:$((PORT + 1))" \
    --vocab "$VOCAB" --min-id "$MIN_ID" --prompts "$PROMPTS" --tokens "$TOKENS" --seed $((SEED + 1)) --tolerance "$tol" \
    --label "$(basename "$GGUF") fresh prompts, derived tolerance" >"$OUT/check_fresh.jsonl" || rc=1
  tail -1 "$OUT/check_fresh.jsonl" | tee -a "$OUT/run.txt"
fi
exit $rc
