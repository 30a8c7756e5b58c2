#!/usr/bin/env bash
# Issue 45 on the GPU host's CPU (an Intel Xeon with AMX; nothing of it on the dev VMs seen lately):
# the quantized-kernel tests that skip without AMX, then the 1B shape as BF16, Q8_0 and Q4_K_M GGUF
# files, Spindle (bench_model_forward: prefill 512 and decode at 512 cached tokens, batch 1 and 16,
# against the read bandwidth measured in the same process) and llama.cpp (llama-bench pp512 / tg64)
# on the same files, pinned to 2 cores. The device tool runs it from the repository root with the
# archive made by tools/gpu/xeon_quant_bundle.sh carried in .device/xq.tar.xz:
#
#   bash tools/gpu/xeon_quant_check.sh        (STEPS, default "env tests models bench")
#
# Output: $OUT/xq/*.txt (one file a step or run).
set -uo pipefail
root=$(pwd)
out=${OUT:-/tmp}/xq
mkdir -p "$out"
x=/tmp/xq
rm -rf "$x" && mkdir -p "$x" && tar -C "$x" -xJf "$root/.device/xq.tar.xz" || { echo "no bundle" >&2; exit 1; }
B=$x/bundle/bin
export SPINDLE_BINARY=$B/spindle LD_LIBRARY_PATH=$x/llama
models=/tmp/xq-models
pin=(taskset -c 0,1)
export SPINDLE_NUM_THREADS=2 OMP_NUM_THREADS=2
STEPS=${STEPS:-env tests models bench}

step_env() {
  { lscpu; grep -m1 -o -w -E 'amx_int8|amx_bf16|avx512_vnni|avx512_bf16' /proc/cpuinfo | sort -u; free -g; nproc
    python3 -c 'import numpy; print("numpy", numpy.__version__)'; } >"$out/env.txt" 2>&1
}

step_tests() {
  for t in amx_instructions_test quant_linear_test linear_test linear_registry_test paged_attention_test attention_selection_test; do
    timeout 600 "$B/$t" --gtest_brief=1 >"$out/test-$t.txt" 2>&1
    echo "$t exit $? ($(grep -c '\[  SKIPPED \]' "$out/test-$t.txt") skipped lines)" >>"$out/tests.txt"
  done
}

step_models() {
  mkdir -p "$models"
  {
    "$B/make_bench_model" "$models/llama1b"
    PYTHONPATH=$x/gguf-py python3 bench/cpu_peer/st_to_gguf.py "$models/llama1b" "$models/llama1b-bf16.gguf" --write-tokenizer
    for q in Q8_0 Q4_K_M; do
      "$x/llama/llama-quantize" "$models/llama1b-bf16.gguf" "$models/llama1b-${q,,}.gguf" "$q" 16 | tail -3
    done
    ls -la "$models" && sha256sum "$models"/*.gguf
  } >"$out/models.txt" 2>&1
}

# Spindle: the bf16 folder and each GGUF file, the auto policy and the named int8 kernels.
step_bench() {
  local f=$B/bench_model_forward
  "${pin[@]}" "$f" --model "$models/llama1b" >"$out/spindle-bf16.txt" 2>&1
  for q in q4_k_m q8_0; do
    "${pin[@]}" "$f" --model "$models/llama1b-$q.gguf" >"$out/spindle-$q-auto.txt" 2>&1
    "${pin[@]}" "$f" --model "$models/llama1b-$q.gguf" --linear amx_int8 >"$out/spindle-$q-amx_int8.txt" 2>&1
    "${pin[@]}" "$f" --model "$models/llama1b-$q.gguf" --linear int8_avx512_vnni >"$out/spindle-$q-avx512_vnni.txt" 2>&1
  done
  for q in bf16 q8_0 q4_k_m; do
    "${pin[@]}" "$x/llama/llama-bench" -m "$models/llama1b-$q.gguf" -p 512 -n 64 -t 2 -r 3 >"$out/llama-$q.txt" 2>&1
  done
}

for s in $STEPS; do
  echo "== $s $(date -u +%T)"
  "step_$s"
done
echo "== done $(date -u +%T)"
