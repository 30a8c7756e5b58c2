#!/usr/bin/env bash
# Makes the bundle tools/gpu/cpu_xeon_check.sh unpacks on the GPU host (see its header), split in
# parts small enough to travel with the tree (the device tool's 64 MiB per call):
#
#   MAIN_BUILD=/work/main/build XEON_BUILD=build LLAMA_DL=/work/peer/llama-dl/build/bin \
#   LLAMA_TOOLS=/work/peer/llama.cpp/build/bin GGUF_PY=/work/peer/llama-dl/gguf-py \
#   PARTS=/work/main/.device/xeon bash tools/gpu/cpu_xeon_bundle.sh
#
# MAIN_BUILD: a build of the tree the device tool sends (its CTestTestfile.cmake files name
#   /work/main/build/...): its CPU test binaries (CUDA tests left out), spindle and benches.
# XEON_BUILD: this branch's build (bench_model_forward, bench_linear, make_bench_model, spindle,
#   linear_test, and the model tests when built).
# LLAMA_DL: llama.cpp's ggml built with -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON
#   -DGGML_CPU_ALL_VARIANTS=ON -DBUILD_SHARED_LIBS=ON (libggml*.so, libggml-cpu-<variant>.so).
# LLAMA_TOOLS: llama-bench, llama-server and the llama/common/mtmd libraries of the same commit
#   (they reference no symbol of libggml-cpu and no CPU macro: any build of that commit serves).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${MAIN_BUILD:?}" "${XEON_BUILD:?}" "${LLAMA_DL:?}" "${LLAMA_TOOLS:?}" "${GGUF_PY:?}" "${PARTS:?}"
stage=${STAGE:-/tmp/xeon-stage}
b=$stage/.bundle_s
rm -rf "$stage" && mkdir -p "$b/build" "$b/build-xeon/bin" "$b/build-xeon/bench" "$b/build-xeon/tests" "$b/lib" \
  "$b/llama/build/bin" "$b/overlay/bench/cpu_peer"

# The main build's ctest files and CPU binaries.
(cd "$MAIN_BUILD" && find . \( -name CTestTestfile.cmake -o -name "*_include.cmake" -o -name "*_tests.cmake" \) \
  -not -path "*/CMakeFiles/*" -not -path "./tests/cuda/*" -not -path "./_deps/*" | tar -cf - -T -) | tar -C "$b/build" -xf -
sed -i '/subdirs("cuda")/d' "$b/build/tests/CTestTestfile.cmake"
sed -i '/server_cuda_test/d' "$b/build/tests/server/CTestTestfile.cmake"
bins=(bin/spindle bench/bench_model_forward bench/bench_linear bench/make_bench_model)
while read -r inc; do  # the binaries ctest runs: one *_include.cmake per test binary
  rel=${inc#./}; rel=${rel%\[1\]_include.cmake}
  [[ -x $MAIN_BUILD/$rel ]] && bins+=("$rel")
done < <(cd "$b/build" && find . -name "*_include.cmake")
for f in "${bins[@]}"; do
  mkdir -p "$b/build/$(dirname "$f")"
  cp "$MAIN_BUILD/$f" "$b/build/$f"
done

# This branch's build; what it has not built (spindle, make_bench_model: nothing of them changed)
# comes from the main build. build-xeon/SOURCES says which is which.
for f in bin/spindle bench/bench_model_forward bench/bench_linear bench/make_bench_model; do
  if [[ -x $XEON_BUILD/$f ]]; then src=$XEON_BUILD; else src=$MAIN_BUILD; fi
  cp "$src/$f" "$b/build-xeon/$f"
  echo "$f from $src" | tee -a "$b/build-xeon/SOURCES"
done
for f in tests/kernels/linear_test tests/model/golden_bf16_activations_test tests/model/model_forward_test; do
  [[ -x $XEON_BUILD/$f ]] && cp "$XEON_BUILD/$f" "$b/build-xeon/tests/"
done

# Shared libraries outside the base system.
excluded='^(linux-vdso|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux|libgcc_s\.so|libstdc\+\+|libcuda\.so|libnvidia)'
for f in $(find "$b/build" "$b/build-xeon" -type f -executable); do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ $name =~ $excluded ]] || cp -L "$path" "$b/lib/$name"
done

# llama.cpp.
cp -a "$LLAMA_DL"/libggml*.so* "$b/llama/build/bin/"
for f in llama-bench llama-server; do cp "$LLAMA_TOOLS/$f" "$b/llama/build/bin/"; done
cp -a "$LLAMA_TOOLS"/libllama*.so* "$LLAMA_TOOLS"/libmtmd*.so* "$b/llama/build/bin/"
for f in "$b/llama/build/bin/llama-server" "$b/llama/build/bin/libllama-common.so"; do
  ldd "$f" | awk '$1 ~ /^lib(ssl|crypto)\.so/ { print $3 }'
done | sort -u | xargs -r -I{} cp -L {} "$b/lib/"
cp -a "$GGUF_PY" "$b/llama/gguf-py"
rm -rf "$b/llama/gguf-py/tests" "$b/llama/gguf-py/examples"

# This branch's scripts, laid over the tree there.
cp bench/cpu_peer/run.sh bench/cpu_peer/servers.sh "$b/overlay/bench/cpu_peer/"
cp bench/loadgen.py bench/lib.sh "$b/overlay/bench/"

find "$b" -type f \( -executable -o -name "*.so*" \) -exec strip --strip-unneeded {} + 2>/dev/null || true
du -sh "$b"/*
mkdir -p "$PARTS" && rm -f "$PARTS"/bundle.part*
tar -C "$stage" -cf - .bundle_s | xz -6 -T2 | split -b 9M -d - "$PARTS/bundle.part"
ls -la "$PARTS"
