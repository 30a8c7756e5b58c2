#!/usr/bin/env bash
# Spindle against llama.cpp on the CPU, on identical weights (issue 15, item 7):
#   bench/results/2026-12-01-cpu-vs-llamacpp.md says what each row is and how it was run.
#
#   bench/cpu_peer/run.sh models          write the models into $MODELS: random bf16 Llama folders
#                                         (build/bench/make_bench_model) with a tokenizer.json, and
#                                         the same weights as bf16 GGUF (st_to_gguf.py), checked bit
#                                         for bit (st_to_gguf.py --verify)
#   bench/cpu_peer/run.sh check OUT_DIR   both servers on each model: greedy ids and logprobs agree
#                                         (check_logits.py), plus a negative control (a GGUF without
#                                         the q/k row permutation must disagree)
#   bench/cpu_peer/run.sh bench OUT_DIR   every row REPS times (default 3); in each repetition each
#                                         row runs Spindle, then llama.cpp, one after the other
#   bench/cpu_peer/summarize.py OUT_DIR   the table (median and range over the repetitions)
#
# Environment: LLAMA_CPP (a llama.cpp tree built CPU-only Release, with build/bin/llama-bench and
# llama-server; nothing of it is in this repository), MODELS (default /work/peer/models),
# PEER_COMMIT (the llama.cpp commit the tree was taken from), THREADS (default 2), REPS (default 3),
# ROWS (default "1b small-hd32 small-hd64 served": the rows `bench` runs), BUILD (default build: the
# Spindle build folder). The served row's client is bench/loadgen.py (python3 only, so the same
# script runs on the GPU host, which has no Node); the servers start through bench/cpu_peer/servers.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
MODELS=${MODELS:-/work/peer/models}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
PY=${PYTHON:-/usr/bin/python3}  # needs numpy (Debian's python3-numpy)
LB=$LLAMA_CPP/build/bin
BUILD=${BUILD:-build}
ROWS=${ROWS:-1b small-hd32 small-hd64 served}
FORWARD=$BUILD/bench/bench_model_forward
LOADGEN=("$PY" bench/loadgen.py)
export SPINDLE_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
. bench/cpu_peer/servers.sh

header() {
  echo "date $(date -u +%FT%TZ); host $(uname -n); $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2);" \
       "flags: $(grep -m1 -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load $(cut -d' ' -f1-3 /proc/loadavg); memory $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "spindle commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo ' (+ uncommitted changes)');" \
       "llama.cpp commit ${PEER_COMMIT:-unknown} (llama-server --version: $("$LB/llama-server" --version 2>&1 | grep -m1 version))"
  echo "threads $THREADS; models $MODELS"
}

make_models() {
  mkdir -p "$MODELS"
  local small="--layers 6 --vocab 8192 --hidden 256 --intermediate 768"
  $BUILD/bench/make_bench_model "$MODELS/llama1b"
  # shellcheck disable=SC2086
  $BUILD/bench/make_bench_model "$MODELS/small-hd32" $small --heads 8 --kv-heads 4 --head-dim 32
  # shellcheck disable=SC2086
  $BUILD/bench/make_bench_model "$MODELS/small-hd64" $small --heads 4 --kv-heads 2 --head-dim 64
  for m in llama1b small-hd32 small-hd64; do
    PYTHONPATH=$LLAMA_CPP/gguf-py $PY bench/cpu_peer/st_to_gguf.py "$MODELS/$m" "$MODELS/$m.gguf" --write-tokenizer
    PYTHONPATH=$LLAMA_CPP/gguf-py $PY bench/cpu_peer/st_to_gguf.py "$MODELS/$m" "$MODELS/$m.gguf" --verify
  done
  PYTHONPATH=$LLAMA_CPP/gguf-py $PY bench/cpu_peer/st_to_gguf.py "$MODELS/small-hd64" \
    "$MODELS/small-hd64-nopermute.gguf" --no-rope-permute
}

check() {
  local out=$1 rc=0
  mkdir -p "$out"
  header | tee "$out/check.log"
  for m in small-hd64 small-hd32 llama1b; do
    local vocab
    vocab=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODELS/$m/config.json")
    start_spindle 8291 "$out/check-$m-spindle.log" "$MODELS/$m"
    start_llama 8292 "$out/check-$m-llama.log" "$MODELS/$m.gguf" -c 4096 -np 1
    for seed in 1; do  # 8 prompts x 32 tokens per call
      $PY bench/cpu_peer/check_logits.py --spindle http://127.0.0.1:8291 --llama http://127.0.0.1:8292 \
        --vocab "$vocab" --seed "$seed" --label "$m seed $seed" | tee -a "$out/check.log" || rc=1
    done
    if [ "$m" = small-hd64 ]; then  # negative control: HF's q/k row order in the GGUF
      kill "$LPID"; wait "$LPID" 2>/dev/null || true; LPID=""
      start_llama 8292 "$out/check-nopermute-llama.log" "$MODELS/small-hd64-nopermute.gguf" -c 4096 -np 1
      $PY bench/cpu_peer/check_logits.py --spindle http://127.0.0.1:8291 --llama http://127.0.0.1:8292 \
        --vocab "$vocab" --seed 1 --negative-control \
        --label "NEGATIVE CONTROL small-hd64 without the q/k permutation" | tee -a "$out/check.log" || rc=1
    fi
    stop_servers
  done
  return $rc
}

row_1b() {  # DIR
  "$FORWARD" --model "$MODELS/llama1b" --context 512 --prompt 512 --steps 16 --matmul-precision auto \
    >"$1/1b-spindle.txt" 2>&1
  "$LB/llama-bench" -m "$MODELS/llama1b.gguf" -t "$THREADS" -p 512 -n 0 -r 1 -o json >"$1/1b-llama-pp.json" 2>"$1/1b-llama-pp.err"
  "$LB/llama-bench" -m "$MODELS/llama1b.gguf" -t "$THREADS" -p 0 -n 16 -d 512 -r 1 -o json >"$1/1b-llama-tg.json" 2>"$1/1b-llama-tg.err"
}

row_small() {  # DIR MODEL
  "$FORWARD" --model "$MODELS/$2" --context 981 --prompt 981 --steps 64 --matmul-precision auto >"$1/$2-spindle.txt" 2>&1
  "$LB/llama-bench" -m "$MODELS/$2.gguf" -t "$THREADS" -p 981 -n 0 -r 3 -o json >"$1/$2-llama-pp.json" 2>"$1/$2-llama-pp.err"
  "$LB/llama-bench" -m "$MODELS/$2.gguf" -t "$THREADS" -p 0 -n 64 -d 981 -r 3 -o json >"$1/$2-llama-tg.json" 2>"$1/$2-llama-tg.err"
}

row_served() {  # DIR: small-hd64 at C=1, 128-token prompts, 64 output tokens, 16 requests after 2 warm-up
  local gen="${LOADGEN[*]} --concurrency 1 --prompt-tokens 128 --output-tokens 64 --vocab 8192"
  start_spindle 8291 "$1/served-spindle.log" "$MODELS/small-hd64"
  $gen --url http://127.0.0.1:8291 --model small-hd64 --requests 2 --seed 99 >/dev/null
  $gen --url http://127.0.0.1:8291 --model small-hd64 --requests 16 --seed 1 --json "$1/served-spindle.json" \
    >"$1/served-spindle.txt"
  stop_servers
  start_llama 8292 "$1/served-llama.log" "$MODELS/small-hd64.gguf" -c 4096 -np 1
  $gen --url http://127.0.0.1:8292 --model small-hd64 --requests 2 --seed 99 >/dev/null
  $gen --url http://127.0.0.1:8292 --model small-hd64 --requests 16 --seed 1 --json "$1/served-llama.json" \
    >"$1/served-llama.txt"
  stop_servers
}

bench_all() {
  local out=$1
  mkdir -p "$out"
  header | tee "$out/bench.log"
  for r in $(seq 1 "$REPS"); do
    local d="$out/rep$r"
    mkdir -p "$d"
    echo "rep $r: start $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/bench.log"
    for row in $ROWS; do
      case $row in
        1b) row_1b "$d" ;;
        small-hd32 | small-hd64) row_small "$d" "$row" ;;
        served) row_served "$d" ;;
        *) echo "unknown row $row" >&2; return 2 ;;
      esac
    done
    echo "rep $r: end $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/bench.log"
  done
}

case "${1:-}" in
  models) make_models ;;
  check) check "${2:?OUT_DIR}" ;;
  bench) bench_all "${2:?OUT_DIR}" ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
esac
