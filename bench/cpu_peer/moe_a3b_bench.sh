#!/usr/bin/env bash
# The full-depth Qwen3-30B-A3B shape as a Q4_K_M GGUF file on the CPU, Spindle then llama.cpp on
# the same file (issue 48 item 7, the CPU part); bench/results/2026-12-07-devvm-moe-a3b-48l/README.md
# says what each row is.
#
#   moe_a3b_bench.sh model          $FILE from make_moe_q4km_gguf.py (random valid Q4_K/Q6_K blocks in
#                                   llama-quantize's Q4_K_M type map, tensor by tensor), then
#                                   llama-quantize --dry-run: the Q4_K_M it would make of the file
#                                   must change no tensor's type
#   moe_a3b_bench.sh check OUT      a 16-token greedy generation in each engine (spindle generate,
#                                   llama-simple), the texts side by side
#   moe_a3b_bench.sh spindle OUT    moe_active_bytes.py, then bench_model_forward: prefill 512, decode
#                                   batch 1 and 16 with 512 cached tokens each (PROFILE=1: a second
#                                   run with --profile 1, the distinct experts and where time went)
#   moe_a3b_bench.sh llama OUT      llama-bench pp512 and tg32 at depth 512, then llama-batched-bench
#                                   (one shared 512-token prompt, 1 and 16 sequences decoding 16 tokens)
#   moe_a3b_bench.sh profile OUT    where Spindle's batch-1 decode time goes: bench_model_forward
#                                   --profile 1 (per product shape) with `perf record` attached for
#                                   10 s of its decode steps (perf-report.txt: the hottest symbols)
#   moe_a3b_bench.sh all OUT        spindle, then llama (llama.cpp starts after Spindle has exited)
#
# Every engine process runs under a memory guard: the file needs ~18 GB resident of the 23.5 GiB
# machine shared with other users, so the process gets oom_score_adj 1000 and is killed (the run
# marked "killed by the memory guard") if MemAvailable falls below GUARD_MB (default 600).
#
# Environment: LLAMA_CPP (a llama.cpp tree with build/bin/llama-bench, llama-batched-bench,
# llama-simple, llama-quantize; gguf-py), FILE (default
# /work/peer/models/moe-bench/a3b-48l-q4_k_m.gguf), THREADS (2), BUILD (build), STEPS (16), REPS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
FILE=${FILE:-/work/peer/models/moe-bench/a3b-48l-q4_k_m.gguf}
THREADS=${THREADS:-2}
BUILD=${BUILD:-build}
STEPS=${STEPS:-16}
REPS=${REPS:-2}
GUARD_MB=${GUARD_MB:-600}
PY=${PYTHON:-/usr/bin/python3}  # needs numpy (Debian's python3-numpy)
LB=$LLAMA_CPP/build/bin
export PYTHONPATH=$LLAMA_CPP/gguf-py SPINDLE_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS

# guarded LOG CMD...: runs CMD (stdout to LOG, stderr to LOG.err) with oom_score_adj 1000, polling
# MemAvailable.
guarded() {
  local log=$1
  shift
  (echo 1000 >/proc/self/oom_score_adj && exec "$@") >"$log" 2>"$log.err" &
  local pid=$! low=0
  while kill -0 "$pid" 2>/dev/null; do
    local avail
    avail=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
    if [ "$avail" -lt "$GUARD_MB" ]; then
      kill "$pid"
      low=1
      echo "killed by the memory guard: MemAvailable ${avail} MB < ${GUARD_MB} MB" | tee -a "$log"
      break
    fi
    sleep 0.5
  done
  wait "$pid" || true
  [ "$low" = 0 ]
}

stamp() {
  echo "$1: date $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg); MemAvailable $(awk '/MemAvailable/ {print int($2 / 1048576 * 10) / 10}' /proc/meminfo) GiB"
}

model() {
  /usr/bin/time -v $PY bench/cpu_peer/make_moe_q4km_gguf.py "$FILE"
  "$LB/llama-quantize" --dry-run --allow-requantize "$FILE" Q4_K_M "$THREADS" 2>&1 | grep -E "size +=|->" || true
}

check() {
  local out=$1
  mkdir -p "$out"
  stamp check | tee -a "$out/bench.txt"
  guarded "$out/check-spindle.txt" "$BUILD/bin/spindle" generate "$FILE" -p "hello world" -n 16 --temperature 0 \
    --max-total-tokens 1024 --max-model-len 1024 || true
  guarded "$out/check-llama.txt" "$LB/llama-simple" -m "$FILE" -n 16 "hello world" || true
  echo "spindle generate: $(grep -a '^hello world' "$out/check-spindle.txt" || echo '(no text)')" | tee -a "$out/bench.txt"
  echo "llama-simple:     $(grep -a '^hello world' "$out/check-llama.txt" || echo '(no text)')" | tee -a "$out/bench.txt"
}

spindle() {
  local out=$1
  mkdir -p "$out"
  stamp "spindle $(git rev-parse --short HEAD)" | tee -a "$out/bench.txt"
  $PY bench/cpu_peer/moe_active_bytes.py "$FILE" | tee -a "$out/bench.txt"
  local args=(--model "$FILE" --context 512 --prompt 512 --steps "$STEPS" --weights-memory mapped)
  guarded "$out/spindle.txt" "$BUILD/bench/bench_model_forward" "${args[@]}" || true
  grep -E "^memory read|^loaded|^prefill|^decode batch|bound from bandwidth|bandwidth now|distinct experts|calling thread|killed" \
    "$out/spindle.txt" \
    | sed "s/^/spindle: /" | tee -a "$out/bench.txt"
  if [ "${PROFILE:-0}" = 1 ]; then
    stamp "spindle --profile 1" | tee -a "$out/bench.txt"
    guarded "$out/spindle-profile.txt" "$BUILD/bench/bench_model_forward" "${args[@]}" --profile 1 || true
    grep -E "^decode batch|experts run|distinct experts|killed" "$out/spindle-profile.txt" \
      | sed "s/^/spindle --profile 1: /" | tee -a "$out/bench.txt"
  fi
}

llama() {
  local out=$1
  mkdir -p "$out"
  stamp "llama.cpp" | tee -a "$out/bench.txt"
  guarded "$out/llama-bench.json" "$LB/llama-bench" -m "$FILE" -t "$THREADS" -p 512 -n 0 -r "$REPS" -o json || true
  guarded "$out/llama-bench-tg.json" "$LB/llama-bench" -m "$FILE" -t "$THREADS" -p 0 -n 32 -d 512 -r "$REPS" -o json || true
  for f in llama-bench llama-bench-tg; do
    $PY -c 'import json,sys
for r in json.load(open(sys.argv[1])):
    print("llama.cpp: pp%d tg%d @ d%d: %.2f +- %.2f tok/s" % (r["n_prompt"], r["n_gen"], r.get("n_depth", 0), r["avg_ts"], r["stddev_ts"]))' \
      "$out/$f.json" 2>/dev/null | tee -a "$out/bench.txt" || echo "llama.cpp: $f: no result" | tee -a "$out/bench.txt"
  done
  stamp "llama-batched-bench" | tee -a "$out/bench.txt"
  guarded "$out/llama-batched-bench.txt" "$LB/llama-batched-bench" -m "$FILE" -t "$THREADS" -c 9216 -b 2048 -ub 512 \
    -npp 512 -ntg "$STEPS" -npl 1,16 -pps || true
  grep -E "^\|" "$out/llama-batched-bench.txt" | sed "s/^/llama-batched-bench: /" | tee -a "$out/bench.txt"
}

profile() {
  local out=$1
  mkdir -p "$out"
  stamp "spindle --profile 1 + perf" | tee -a "$out/bench.txt"
  "$BUILD/bench/bench_model_forward" --model "$FILE" --context 512 --prompt 16 --steps "${PROFILE_STEPS:-300}" \
    --weights-memory mapped --profile 1 --decode-batches 1 >"$out/spindle-profile.txt" 2>&1 &
  local pid=$!
  until grep -q "(timing" "$out/spindle-profile.txt" || ! kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  perf record -F 999 -g -p "$pid" -o "$out/perf.data" -- sleep 10 >/dev/null 2>&1 || true
  wait "$pid" || true
  perf report -i "$out/perf.data" --no-children --sort symbol --percent-limit 0.3 --stdio 2>/dev/null \
    | grep -E "^ +[0-9.]+%" | sed -E 's/[[:space:]-]+$//' >"$out/perf-report.txt" || true
  rm -f "$out/perf.data"
  sed -n '/^decode batch 1/,$p' "$out/spindle-profile.txt" | tee -a "$out/bench.txt"
  head -15 "$out/perf-report.txt" | tee -a "$out/bench.txt"
}

case "${1:-}" in
  model) model ;;
  check) check "${2:?OUT directory}" ;;
  spindle) spindle "${2:?OUT directory}" ;;
  llama) llama "${2:?OUT directory}" ;;
  profile) profile "${2:?OUT directory}" ;;
  all)
    spindle "${2:?OUT directory}"
    llama "$2"
    ;;
  *)
    echo "usage: $0 model | check OUT | spindle OUT | llama OUT | profile OUT | all OUT"
    exit 2
    ;;
esac
