#!/usr/bin/env bash
# Makes .device/xq.tar.xz, the archive tools/gpu/xeon_quant_check.sh unpacks on the GPU host:
# bundle/ (scripts/bundle.sh: spindle, the AMX-skipping kernel tests, bench_model_forward,
# make_bench_model and their libraries), llama/ (llama-bench, llama-quantize and their libraries
# from a llama.cpp build) and gguf-py/ (st_to_gguf.py's writer).
#
#   LLAMA_CPP=/work/peer/llama.cpp bash tools/gpu/xeon_quant_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp tree built CPU-only (build/bin)}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
SPINDLE_BUNDLE_BINARIES="tests/kernels/amx_instructions_test tests/kernels/quant_linear_test tests/kernels/linear_test tests/kernels/linear_registry_test
  tests/kernels/paged_attention_test tests/attn/attention_selection_test bench/bench_model_forward bench/make_bench_model" \
  scripts/bundle.sh "$stage/bundle" >/dev/null
strip "$stage"/bundle/bin/* 2>/dev/null || true
mkdir -p "$stage/llama"
cp -L "$LLAMA_CPP"/build/bin/{llama-bench,llama-quantize} "$LLAMA_CPP"/build/bin/lib*.so* "$stage/llama/"
cp -r "$LLAMA_CPP/gguf-py" "$stage/gguf-py"
mkdir -p .device
tar -C "$stage" -cJf .device/xq.tar.xz bundle llama gguf-py
ls -la .device/xq.tar.xz
