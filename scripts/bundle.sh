#!/usr/bin/env bash
# Makes a relocatable folder holding the built spindle binary and the shared libraries it needs,
# so it runs on a machine that has none of the build's -dev packages (e.g. the GPU host):
#
#   scripts/bundle.sh                      build/ -> .bundle/
#   scripts/bundle.sh OUT_DIR              build/ -> OUT_DIR
#   SPINDLE_BUILD_DIR=build-x scripts/bundle.sh
#   SPINDLE_BUNDLE_BINARIES="tests/kernels/quant_linear_test ..." scripts/bundle.sh OUT_DIR
#                                          spindle and these binaries (build-relative) only
#   scripts/bundle.sh --archive [OUT_DIR]  also writes OUT_DIR.tar.gz (e.g. .bundle.tar.gz, ignored
#                                          by git): the bundle is ~90 MB, over the device tool's 64 MiB
#                                          carry limit; the archive is ~31 MB. There:
#                                          tar -xzf .bundle.tar.gz && .bundle/bin/spindle doctor
#
# Result:
#   OUT/bin/spindle                  RPATH $ORIGIN/../lib
#   OUT/bin/cuda_attention_test      when built (tests/cuda); run it with SPINDLE_BINARY=OUT/bin/spindle
#   OUT/bin/cuda_model_test          so its validation child is the bundled binary
#   OUT/bin/bench_attention_cuda     when built (bench/); bench/run_cuda_bench.sh finds it there
#   OUT/lib/*.so*                    every library `ldd` lists except the base system's (libc, libm,
#                                    libpthread, libdl, librt, ld-linux, libgcc_s) and the NVIDIA
#                                    driver's (libcuda.so*, libnvidia*), which the target provides;
#                                    cuBLAS and cuDNN are dlopen'ed there at run time
#
# The CUDA runtime is linked statically (CUDA::cudart_static), so only the driver is needed there.
# Needs patchelf (a Debian package; scripts/setup.sh installs it). .bundle/ is ignored by git.
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=${SPINDLE_BUILD_DIR:-build}
archive=0
if [[ ${1:-} == --archive ]]; then archive=1; shift; fi
out=${1:-.bundle}
out=${out%/}

command -v patchelf >/dev/null || { echo "bundle: patchelf not found (apt-get install patchelf)" >&2; exit 1; }
[[ -x $build_dir/bin/spindle ]] || { echo "bundle: $build_dir/bin/spindle not built (ninja -C $build_dir spindle)" >&2; exit 1; }

binaries=("$build_dir/bin/spindle")
optionals=(tests/cuda/cuda_attention_test tests/cuda/cuda_model_test tests/cuda/cuda_sampler_test
    tests/cuda/cuda_engine_test tests/cuda/cuda_ops_test tests/cuda/split_policy_test tests/cuda/cuda_gemv_fp8_test
    tests/cuda/cuda_fp8_join_test tests/cuda/cuda_fp8_model_test tests/cuda/cuda_fp8_lt_test tests/cuda/cuda_fp8_registry_test bench/bench_fp8_lt
    bench/bench_attention_cuda bench/bench_spec_verify bench/bench_gemv_fp8
    bench/bench_gemv16 tests/server/server_cuda_test tests/cuda/cuda_moe_kernels_test tests/cuda/cuda_moe_model_test
    bench/bench_moe_cuda)
# SPINDLE_BUNDLE_BINARIES="tests/kernels/quant_linear_test bench/bench_model_forward ...": these
# build-relative binaries instead of the list above (each must be built).
if [[ -n ${SPINDLE_BUNDLE_BINARIES:-} ]]; then
  read -r -a optionals <<<"$SPINDLE_BUNDLE_BINARIES"
  for b in "${optionals[@]}"; do
    [[ -x $build_dir/$b ]] || { echo "bundle: $build_dir/$b not built" >&2; exit 1; }
  done
fi
for optional in "${optionals[@]}"; do
  if [[ -x $build_dir/$optional ]]; then binaries+=("$build_dir/$optional"); fi
done

# Base system and NVIDIA driver libraries stay behind. cuBLAS and cuDNN are loaded at run time
# (dlopen) from the GPU host's CUDA installation (on our H200 host: PyTorch's nvidia-* wheels, put
# their lib/ folders on LD_LIBRARY_PATH); libcublas is excluded should a build ever link it.
excluded='^(linux-vdso|linux-gate|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux|libgcc_s\.so|libcuda\.so|libnvidia|libcublas)'

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"

for bin in "${binaries[@]}"; do
  dest="$out/bin/$(basename "$bin")"
  cp "$bin" "$dest"
  chmod u+w "$dest"
  # "name => /path (addr)" lines; a "not found" library fails the bundle.
  if ldd "$bin" | grep -q "not found"; then
    echo "bundle: $bin has unresolved libraries:" >&2
    ldd "$bin" | grep "not found" >&2
    exit 1
  fi
  while read -r name path; do
    [[ $name =~ $excluded ]] && continue
    [[ -f $out/lib/$name ]] && continue
    cp -L "$path" "$out/lib/$name"
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
  # DT_RPATH (not RUNPATH) so the libraries' own dependencies resolve from lib/ as well.
  patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$dest"
done

for lib in "$out"/lib/*; do
  chmod u+w "$lib"
  patchelf --set-rpath '$ORIGIN' "$lib"
done

# Every non-excluded dependency must now resolve inside the bundle.
lib_dir=$(cd "$out/lib" && pwd -P)
for dest in "$out"/bin/*; do
  while read -r name path; do
    [[ $name =~ $excluded ]] && continue
    if [[ $path != /* || $(dirname "$(realpath "$path")") != "$lib_dir" ]]; then
      echo "bundle: $dest: $name resolves to $path, outside the bundle" >&2
      exit 1
    fi
  done < <(ldd "$dest" | awk '$2 == "=>" { print $1, $3 }')
done

echo "bundle: $out ($(du -sh "$out" | cut -f1)): bin/ $(ls "$out/bin" | tr '\n' ' ')"
echo "bundle: lib/ $(ls "$out/lib" | tr '\n' ' ')"

if ((archive)); then
  tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
  echo "bundle: $out.tar.gz ($(du -sh "$out.tar.gz" | cut -f1))"
fi
