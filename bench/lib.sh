# Shared pieces of the bench/ shell scripts. Source it from a script's own folder:
#   . "$(dirname "$0")/../lib.sh"     (bench/<dir>/x.sh)     . "$(dirname "$0")/lib.sh"     (bench/x.sh)

# bench_header COMMAND...: the machine and commit lines every results log starts with.
bench_header() {
  echo "date $(date -u +%FT%TZ); host $(uname -n); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); command: $*"
}

# healthy PORT: whether GET /health on localhost:PORT answers 200 (curl, or python3 where a host
# has no curl).
healthy() {
  if command -v curl >/dev/null; then curl -sf "localhost:$1/health" >/dev/null 2>&1; return; fi
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://localhost:$1/health" >/dev/null 2>&1
}

# wait_healthy PORT PID SECONDS LOG: returns 0 as soon as GET /health on localhost:PORT answers
# 200; when the server PID exits first or SECONDS pass, prints why and LOG's tail, returns 1.
wait_healthy() {
  local port=$1 pid=$2 limit=$3 log=$4 start=$SECONDS
  while (( SECONDS - start < limit )); do
    healthy "$port" && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "the server (pid $pid) exited before it was healthy; $log:"; tail "$log"; return 1
    fi
    sleep 0.5
  done
  echo "the server was not healthy after ${limit} s; $log:"; tail "$log"; return 1
}
