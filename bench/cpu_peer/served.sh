#!/usr/bin/env bash
# Served decode on the CPU, `spindle serve` against llama.cpp's `llama-server` on the same GGUF files
# (issue 45, item 6: served C=1 and C=16):
#
#   bench/cpu_peer/served.sh OUT_DIR     per file of $FILES, both servers up side by side (2 threads
#                                        each, the same context per sequence, greedy, ignore_eos,
#                                        token-id prompts of exactly $PROMPT tokens, $OUTPUT output
#                                        tokens); then REPS repetitions, each running C=1 and C=16 on
#                                        both engines back to back (the order alternates between
#                                        repetitions), with bench/loadgen.py
#   bench/cpu_peer/served_summary.py OUT_DIR   the table: per file, C and engine the aggregate
#                                        output tok/s, per-request decode tok/s (1000 / TPOT), TTFT;
#                                        each ratio is taken inside one repetition
#
# Both servers stay up while the other one is measured: an idle server of either engine sleeps
# (checked in the log: each level's lines carry the load average and both servers' CPU seconds).
# llama-server runs as the issue states: -np SLOTS -c SLOTS x (PROMPT + OUTPUT) -t T -tb T -fa on;
# Spindle gets the same per-sequence context (--max-model-len PROMPT + OUTPUT), the same total
# (--max-total-tokens) and the same number of running sequences (--max-running-requests SLOTS).
#
# Environment: LLAMA_CPP (a llama.cpp tree with build/bin/llama-server), PEER_COMMIT (its commit),
# MODELS (default /work/peer/models), FILES (default "llama1b-q4_k_m llama1b-q8_0": $MODELS/F.gguf),
# THREADS (2), REPS (2), PROMPT (128), OUTPUT (64), SLOTS (16), C1_REQUESTS (4), C16_REQUESTS (32),
# VOCAB (32000: prompt ids are drawn from [0, VOCAB)), BUILD (build).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
MODELS=${MODELS:-/work/peer/models}
FILES=${FILES:-llama1b-q4_k_m llama1b-q8_0}
THREADS=${THREADS:-2}
REPS=${REPS:-2}
PROMPT=${PROMPT:-128}
OUTPUT=${OUTPUT:-64}
SLOTS=${SLOTS:-16}
C1_REQUESTS=${C1_REQUESTS:-4}
C16_REQUESTS=${C16_REQUESTS:-32}
VOCAB=${VOCAB:-32000}
PY=${PYTHON:-/usr/bin/python3}
LB=$LLAMA_CPP/build/bin
BUILD=${BUILD:-build}
export SPINDLE_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
. bench/cpu_peer/servers.sh
SPORT=8391 LPORT=8392
OUT=${1:?usage: served.sh OUT_DIR}
mkdir -p "$OUT"
LOG=$OUT/served.log

cpu_seconds() {  # PID: user + system CPU seconds of the process so far
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

note() { echo "$(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg); $*" | tee -a "$LOG"; }

# level ENGINE PORT FILE C REQUESTS REP: one closed-loop level of loadgen.py, its JSON kept
level() {
  local engine=$1 port=$2 file=$3 conc=$4 requests=$5 rep=$6
  local s0 l0
  s0=$(cpu_seconds "$SPID") l0=$(cpu_seconds "$LPID")
  note "rep $rep $file $engine C=$conc start"
  "$PY" bench/loadgen.py --url "http://127.0.0.1:$port" --model "$file" --concurrency "$conc" \
    --requests "$requests" --prompt-tokens "$PROMPT" --output-tokens "$OUTPUT" --vocab "$VOCAB" \
    --seed "$((rep * 100 + conc))" --label "$engine $file rep $rep" \
    --json "$OUT/rep$rep/$file-$engine-c$conc.json" | tee -a "$LOG"
  note "rep $rep $file $engine C=$conc end; CPU seconds during it: spindle" \
    "$(awk -v a="$s0" -v b="$(cpu_seconds "$SPID")" 'BEGIN{printf "%.1f", b - a}')," \
    "llama-server $(awk -v a="$l0" -v b="$(cpu_seconds "$LPID")" 'BEGIN{printf "%.1f", b - a}')"
}

{
  bench_header "bench/cpu_peer/served.sh $OUT"
  echo "spindle $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo ' (+ uncommitted changes)');" \
       "llama.cpp ${PEER_COMMIT:-unknown} ($("$LB/llama-server" --version 2>&1 | grep -m1 version))"
  echo "threads $THREADS; prompt $PROMPT; output $OUTPUT; slots $SLOTS; requests C=1 $C1_REQUESTS, C=16 $C16_REQUESTS;" \
       "reps $REPS; files $FILES in $MODELS; uptime: $(uptime)"
} | tee "$LOG"

for file in $FILES; do
  gguf=$MODELS/$file.gguf
  start_spindle "$SPORT" "$OUT/$file-spindle.log" "$gguf" --served-model-name "$file" \
    --max-model-len "$((PROMPT + OUTPUT))" --max-total-tokens "$((SLOTS * (PROMPT + OUTPUT)))" \
    --max-running-requests "$SLOTS"
  start_llama "$LPORT" "$OUT/$file-llama.log" "$gguf" --alias "$file" -np "$SLOTS" \
    -c "$((SLOTS * (PROMPT + OUTPUT)))" -fa on
  note "$file: both servers healthy (spindle pid $SPID, llama-server pid $LPID)"
  for engine_port in "spindle $SPORT" "llama $LPORT"; do  # first-use costs (2 requests), not measured
    set -- $engine_port
    "$PY" bench/loadgen.py --url "http://127.0.0.1:$2" --model "$file" --concurrency 2 \
      --requests 2 --prompt-tokens "$PROMPT" --output-tokens 4 --vocab "$VOCAB" --seed 7 >/dev/null
  done
  for rep in $(seq 1 "$REPS"); do
    mkdir -p "$OUT/rep$rep"
    order="spindle llama"; (( rep % 2 == 0 )) && order="llama spindle"
    for conc in 1 "$SLOTS"; do
      requests=$C1_REQUESTS; (( conc > 1 )) && requests=$C16_REQUESTS
      for engine in $order; do
        port=$SPORT; [ "$engine" = llama ] && port=$LPORT
        level "$engine" "$port" "$file" "$conc" "$requests" "$rep"
      done
    done
  done
  stop_servers
done
note "done"
"$PY" bench/cpu_peer/served_summary.py "$OUT" | tee "$OUT/summary.md"
