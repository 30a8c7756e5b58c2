#!/usr/bin/env bash
# Issue 15 on the GPU host's CPU (Intel Xeon with AVX-512 BF16 and AMX): the CPU test suite and
# the CPU table side by side with llama.cpp, in one go. The device tool runs it from the repo
# root (a copy of /work/main) with a bundle carried in .device/xeon (split in parts over several
# calls: each call but the last copies its part to /tmp/xeon-parts with STEPS=stash). Logs go to
# /tmp/xeon-out, packed into $OUT/xeon-out.tar.gz after every step.
#
# The bundle (.bundle_s/, made by hand on the dev VM; see bench/results/2026-12-02-xeon-*/README.md):
#   build/        a stripped copy of the main tree's build: bin/spindle, the CPU test binaries
#                 with their CTestTestfile.cmake / *_tests.cmake (ctest runs them as `make test`
#                 does; CUDA tests left out), bench_model_forward, bench_linear, make_bench_model
#   build-xeon/   this branch's build (SPINDLE_CUDA=OFF): spindle, the benches, changed tests
#   lib/          the shared libraries ldd lists outside the base system (oneDNN, ICU, spdlog, ...)
#   llama/        llama.cpp 34af94cd: build/bin (llama-bench, llama-server, libggml-cpu-*.so of
#                 GGML_CPU_ALL_VARIANTS, loaded at run time by GGML_BACKEND_DL) and gguf-py
#   overlay/      this branch's scripts, copied over the tree (bench/cpu_peer/run.sh, bench/loadgen.py)
#
# STEPS (default "env tests bench linear threads16"):
#   stash      copy .device/xeon/* to /tmp/xeon-parts (the calls before the last)
#   env        lscpu, flags, topology, the two cores chosen, python/numpy
#   tests      ctest over the main build's CPU tests (-j CTEST_J, default 12), then this branch's
#              changed test binaries directly
#   bench      bench/cpu_peer/run.sh models + bench (ROWS, REPS) pinned to 2 physical cores
#              (taskset), THREADS=2; plus the 1B row of the main build's bench_model_forward
#              (the policy before this branch) right after, for an A/B in the same run
#   linear     bench_linear --shapes-only (and the rows sweep, --sweep-only, with LINEAR_SWEEP=1),
#              pinned, 2 threads
#   threads16  the 1B row with THREADS=16, not pinned
set -uo pipefail
out=/tmp/xeon-out
steps=${STEPS:-env tests bench linear threads16}
has() { [[ " $steps " == *" $1 "* ]]; }

if has stash; then
  mkdir -p /tmp/xeon-parts && cp .device/xeon/bundle.part* /tmp/xeon-parts/ && ls -la /tmp/xeon-parts
  exit 0
fi

mkdir -p "$out"  # kept across calls: each call brings back everything so far
pack() { [[ -n ${OUT:-} ]] && tar -czf "$OUT/xeon-out.tar.gz" -C /tmp xeon-out; }
trap pack EXIT
start=$SECONDS

# Compiled-in source paths (goldens, fixtures, ctest's binaries) point at /work/main.
if [[ ! -e /work/main ]]; then mkdir -p /work && ln -s "$PWD" /work/main; fi
# The bundle is unpacked outside the tree (/tmp/xeon-b), which the next call's copy leaves alone.
B=/tmp/xeon-b/.bundle_s
if [[ ! -d $B ]]; then
  mkdir -p /tmp/xeon-parts /tmp/xeon-b
  cp .device/xeon/bundle.part* /tmp/xeon-parts/ 2>/dev/null
  ls -la /tmp/xeon-parts
  cat /tmp/xeon-parts/bundle.part* | tar -C /tmp/xeon-b -xJf - || { echo "bundle: unpack failed"; exit 1; }
fi
rm -rf build build-xeon && cp -a $B/build build && cp -a $B/build-xeon build-xeon
cp -a $B/overlay/. .  # tracked files: every call's copy of the tree restores them, so every call overlays
export LD_LIBRARY_PATH=$B/lib:$B/llama/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SPINDLE_CACHE_DIR=/tmp/spindle-cache
# CPU only, as on a machine without a GPU: the main build is a CUDA build, and this host has one.
export CUDA_VISIBLE_DEVICES=
export LLAMA_CPP=$B/llama PEER_COMMIT=34af94cd9ab277632e27caeec2d41de2fd091b31
export MODELS=/tmp/xeon-models PYTHON=$(command -v python3)

# Two physical cores of one socket: the first CPU of each of the first two cores in lscpu's list.
cores=$(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | awk -F, '!seen[$3 "," $2]++ && $3 == 0 { print $1 }' | head -2 | paste -sd,)
pin=(taskset -c "$cores")

if has env; then
  { date -u; uname -a; lscpu; echo; lscpu -e; echo; grep -m1 flags /proc/cpuinfo; echo;
    echo "pinned cores: $cores"; free -g; nproc; python3 -c 'import numpy, sys; print(sys.version, numpy.__version__)';
    command -v ctest cmake node curl taskset; ctest --version | head -1; cat /sys/kernel/mm/transparent_hugepage/enabled;
  } >"$out/env.txt" 2>&1
  grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node|L2|L3|pinned" "$out/env.txt"
  grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E "avx512|amx" | paste -sd' '
fi

make_models() {  # the bench's models (random bf16 Llamas, safetensors and GGUF, checked bit for bit)
  echo "== models $(date -u +%T)"
  timeout 300 env BUILD=build-xeon bash bench/cpu_peer/run.sh models >"$out/models.txt" 2>&1
  echo "== models exit $? $(date -u +%T)"; tail -3 "$out/models.txt"
}
# models_bg: make them while the tests run (they use a core or two; the tests' results do not
# depend on timing).
models_pid=""
if has models_bg; then make_models & models_pid=$!; fi

if has tests; then
  # The main build's CPU suite, as `make test` runs it (ctest; CUDA tests left out of the bundle).
  timeout "${TESTS_TIMEOUT:-300}" ctest --test-dir build -j "${CTEST_J:-12}" --timeout 240 --output-on-failure \
    >"$out/ctest.txt" 2>&1
  echo "== ctest exit $?"
  grep -E "tests passed|tests failed|Total Test time|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|\(Subprocess|Not Run|Disabled" "$out/ctest.txt" | head -40
  # (Per-binary counts: ctest's test names mapped to binaries through build/tests/**/*_tests.cmake,
  # done on the dev VM from ctest.txt.)
  for b in build-xeon/tests/*; do
    n=$(basename "$b")
    timeout 240 "$b" >"$out/branch_$n.txt" 2>&1
    echo "== branch $n exit $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|^\[  FAILED|SKIPPED \] .*:" "$out/branch_$n.txt" | head -20
  done
  pack
fi
[[ -n $models_pid ]] && wait "$models_pid"

if has bench; then
  [[ -f $MODELS/small-hd64.gguf ]] || make_models
  echo "== bench $(date -u +%T) on cores $cores"
  timeout "${BENCH_TIMEOUT:-300}" "${pin[@]}" env BUILD=build-xeon THREADS=2 REPS=${REPS:-1} ROWS="${ROWS:-1b small-hd32 small-hd64 served}" \
    bash bench/cpu_peer/run.sh bench "$out/bench" >"$out/bench.txt" 2>&1
  echo "== bench exit $? $(date -u +%T)"
  python3 bench/cpu_peer/summarize.py "$out/bench" >"$out/summary.md" 2>&1; cat "$out/summary.md"
  grep -h -E "load_backend|CPU :|AMX|system_info" "$out"/bench/rep1/*.err 2>/dev/null | sort -u | head -8
  # A/B: the same 1B row with the main build's bench_model_forward (the policy before this branch).
  "${pin[@]}" env SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 timeout 120 build/bench/bench_model_forward \
    --model "$MODELS/llama1b" --context 512 --prompt 512 --steps 16 --matmul-precision auto >"$out/1b-main-build.txt" 2>&1
  echo "== main-build 1B forward exit $?"; grep -E "linear kernel|prefill|decode batch|bound" "$out/1b-main-build.txt"
  pack
fi

if has linear; then
  "${pin[@]}" env SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 timeout 200 build-xeon/bench/bench_linear --shapes-only \
    >"$out/linear_shapes.txt" 2>&1
  echo "== linear shapes exit $?"; cat "$out/linear_shapes.txt"
  if [[ ${LINEAR_SWEEP:-0} == 1 ]]; then
    "${pin[@]}" env SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2 timeout 120 build-xeon/bench/bench_linear --sweep-only \
      >"$out/linear_sweep.txt" 2>&1
    echo "== linear sweep exit $?"; cat "$out/linear_sweep.txt"
  fi
  pack
fi

if has threads16; then
  timeout 150 env BUILD=build-xeon THREADS=16 REPS=1 ROWS=1b bash bench/cpu_peer/run.sh bench "$out/bench16" >"$out/bench16.txt" 2>&1
  echo "== threads16 exit $?"; grep -E "linear kernel|prefill|decode batch|bound" "$out/bench16/rep1/1b-spindle.txt"
  python3 -c 'import json,sys; [print(p, r["n_prompt"], r["n_gen"], r["avg_ts"]) for p in sys.argv[1:] for r in json.load(open(p))]' \
    "$out"/bench16/rep1/1b-llama-*.json
fi
echo "== done in $((SECONDS - start)) s"
