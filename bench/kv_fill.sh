#!/usr/bin/env bash
# Runs bench_kv_fill inside a fresh memory cgroup with a small limit, so that auto capacity plans
# a pool that fills in minutes rather than the tens of GiB a large machine's free memory gives.
# Needs root (it creates the cgroup). The cgroup is removed afterwards.
#
# usage: bench/kv_fill.sh [bench_kv_fill args...]
# env:   KV_FILL_LIMIT   memory limit, bytes or with a K/M/G suffix (768M)
#        BENCH_KV_FILL   the binary (build/bench/bench_kv_fill under the repository)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${BENCH_KV_FILL:-$here/build/bench/bench_kv_fill}"
limit_text="${KV_FILL_LIMIT:-768M}"
limit=$(numfmt --from=iec "$limit_text")
name="spindle_kv_fill_$$"

[[ -x "$bin" ]] || { echo "kv_fill.sh: no $bin (ninja -C build bench_kv_fill)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "kv_fill.sh: needs root to create a memory cgroup" >&2; exit 1; }

# cgroup v1 has a "memory" hierarchy of its own; v2 is one unified tree.
if [[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
  version=v1
  cg=/sys/fs/cgroup/memory/$name
  mkdir "$cg"
  echo "$limit" > "$cg/memory.limit_in_bytes"
  # Without swap accounting memsw may be absent; where present keep swap out of the picture.
  [[ -f $cg/memory.memsw.limit_in_bytes ]] && echo "$limit" > "$cg/memory.memsw.limit_in_bytes" || true
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  version=v2
  grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory > /sys/fs/cgroup/cgroup.subtree_control
  cg=/sys/fs/cgroup/$name
  mkdir "$cg"
  echo "$limit" > "$cg/memory.max"
  [[ -f $cg/memory.swap.max ]] && echo 0 > "$cg/memory.swap.max" || true
else
  echo "kv_fill.sh: no memory cgroup controller found under /sys/fs/cgroup" >&2
  exit 1
fi
cleanup() { rmdir "$cg" 2>/dev/null || true; }
trap cleanup EXIT

echo "kv_fill.sh: cgroup $version $cg, limit $limit bytes ($limit_text)"
echo "kv_fill.sh: $bin $*"
set +e
# The subshell moves itself into the cgroup, then becomes the benchmark.
( echo "$BASHPID" > "$cg/cgroup.procs" && exec "$bin" "$@" )
rc=$?
set -e

if [[ $version == v1 ]]; then
  echo "kv_fill.sh: cgroup peak $(cat "$cg/memory.max_usage_in_bytes") bytes, limit hit $(cat "$cg/memory.failcnt") times," \
       "OOM kills $(awk '/oom_kill /{print $2}' "$cg/memory.oom_control" 2>/dev/null || echo '?')"
else
  echo "kv_fill.sh: cgroup peak $(cat "$cg/memory.peak" 2>/dev/null || echo '?') bytes;" \
       "events: $(tr '\n' ' ' < "$cg/memory.events")"
fi
echo "kv_fill.sh: bench exit status $rc"
exit $rc
