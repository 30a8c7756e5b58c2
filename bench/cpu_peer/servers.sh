# shellcheck shell=bash
# The two servers of the bench/cpu_peer scripts (run.sh, moe_check.sh), one of each at a time:
# `spindle serve` (pid in SPID) and llama.cpp's llama-server (pid in LPID), each started in the
# background and waited for until GET /health answers (bench/lib.sh wait_healthy, at most 150 s).
# Source it from the repository root after setting BUILD (the Spindle build folder), LB (llama.cpp's
# build/bin) and THREADS; it installs stop_servers as the EXIT trap.
. bench/lib.sh

SPID="" LPID=""
stop_servers() {
  [ -n "$SPID" ] && { kill "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; }
  [ -n "$LPID" ] && { kill "$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true; }
  SPID="" LPID=""
}
trap stop_servers EXIT

# start_spindle PORT LOG MODEL [ARG...]: spindle serve MODEL --port PORT --threads THREADS ARG...
start_spindle() {
  local port=$1 log=$2; shift 2
  "$BUILD/bin/spindle" serve "$1" --port "$port" --threads "$THREADS" "${@:2}" >"$log" 2>&1 &
  SPID=$!
  wait_healthy "$port" "$SPID" 150 "$log"
}

# start_llama PORT LOG GGUF [ARG...]: llama-server -m GGUF --port PORT -t THREADS -tb THREADS ARG...
start_llama() {
  local port=$1 log=$2; shift 2
  "$LB/llama-server" -m "$1" --port "$port" -t "$THREADS" -tb "$THREADS" "${@:2}" >"$log" 2>&1 &
  LPID=$!
  wait_healthy "$port" "$LPID" 150 "$log"
}
