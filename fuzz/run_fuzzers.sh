#!/usr/bin/env bash
# Builds the fuzz targets with clang (Debian 12: clang-14 with libclang-rt-14-dev, installed here when missing) and runs each for SECONDS (default 60) from the seed
# corpus in fuzz/corpus; new inputs go to a scratch corpus, crashes to build-fuzz/artifacts/.
# Usage: fuzz/run_fuzzers.sh [SECONDS]   (env CC/CXX pick the compiler; default clang)
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${root}/build-fuzz"
for pkg in clang libclang-rt-14-dev; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
    break
  fi
done
CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "${root}" -B "${build}" -G Ninja \
  -DSPINDLE_FUZZ=ON -DSPINDLE_CUDA=OFF -DSPINDLE_TESTS=OFF >/dev/null
ninja -C "${build}" fuzz_safetensors_header fuzz_model_config fuzz_request_json fuzz_tokenizer_json \
  fuzz_gguf_header fuzz_jinja_template fuzz_json_schema fuzz_regex fuzz_gbnf
mkdir -p "${build}/artifacts"
targets="${SPINDLE_FUZZ_TARGETS:-fuzz_safetensors_header:safetensors fuzz_model_config:config fuzz_request_json:request fuzz_tokenizer_json:tokenizer fuzz_gguf_header:gguf fuzz_jinja_template:jinja fuzz_json_schema:json_schema fuzz_regex:regex fuzz_gbnf:gbnf}"
for pair in ${targets}; do
  target="${pair%%:*}"
  corpus="${pair##*:}"
  scratch="${build}/corpus/${corpus}"
  mkdir -p "${scratch}"
  echo "== ${target} for ${seconds}s"
  "${build}/fuzz/${target}" -dict="${root}/fuzz/${corpus}.dict" -max_total_time="${seconds}" \
    -artifact_prefix="${build}/artifacts/${target}-" -print_final_stats=1 \
    "${scratch}" "${root}/fuzz/corpus/${corpus}"
done
