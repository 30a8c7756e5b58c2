#!/usr/bin/env bash
# check_logits.py tested against llama-server alone (no Spindle needed):
#   1. llama-server vs itself on GGUF (reference: /completion, candidate: /v1/completions, the
#      OpenAI path Spindle is checked through) -- must pass;
#   2. llama-server on GGUF vs llama-server on each NEGATIVE file (a perturbed copy, e.g.
#      perturb_gguf.py's, or st_to_gguf.py --no-rope-permute's) -- must fail (--negative-control).
# usage: LLAMA_CPP=<tree> check_logits_selftest.sh OUT_DIR GGUF VOCAB MIN_ID [NEGATIVE.gguf ...]
# Environment: THREADS (default 2), PROMPTS (8), TOKENS (32), TOLERANCE (0.1). Exit 1 when any
# expectation fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
OUT=${1:?OUT_DIR} GGUF=${2:?GGUF} VOCAB=${3:?VOCAB} MIN_ID=${4:?MIN_ID}
shift 4
THREADS=${THREADS:-2} PROMPTS=${PROMPTS:-8} TOKENS=${TOKENS:-32} TOLERANCE=${TOLERANCE:-0.1}
SERVER=$LLAMA_CPP/build/bin/llama-server
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; PIDS=(); }
trap cleanup EXIT

serve() {  # GGUF PORT LOG
  "$SERVER" -m "$1" --port "$2" -t "$THREADS" -tb "$THREADS" -c 2048 -np 1 >"$3" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$2/health" >/dev/null 2>&1 && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -20 "$3"; return 1; }
    sleep 0.5
  done
  echo "llama-server on $1 not healthy"; return 1
}

check() {  # LABEL CANDIDATE_PORT [--negative-control]
  python3 bench/cpu_peer/check_logits.py --reference http://127.0.0.1:8301 --candidate "http://127.0.0.1:$2" \
    --candidate-api openai --vocab "$VOCAB" --min-id "$MIN_ID" --prompts "$PROMPTS" --tokens "$TOKENS" \
    --tolerance "$TOLERANCE" --label "$1" "${@:3}" | tee -a "$OUT/selftest.log"
}

rc=0
echo "date $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg); $GGUF ($(sha256sum "$GGUF" | cut -c1-16))" \
  | tee "$OUT/selftest.log"
serve "$GGUF" 8301 "$OUT/reference.log"
serve "$GGUF" 8302 "$OUT/same.log"
check "same file: must pass" 8302 || rc=1
check "same file, tokens matched by text (as for Spindle's answers): must pass" 8302 --match text || rc=1
for neg in "$@"; do
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; unset 'PIDS[-1]'
  serve "$neg" 8302 "$OUT/negative-$(basename "$neg").log"
  check "NEGATIVE $(basename "$neg") ($(sha256sum "$neg" | cut -c1-16)): must fail" 8302 --negative-control || rc=1
done
echo "selftest exit $rc" | tee -a "$OUT/selftest.log"
exit $rc
