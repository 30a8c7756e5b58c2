#!/usr/bin/env bash
# Installs every Debian package Spindle's build and tests need (only what is missing, with one
# `apt-get update` first), then configures and builds into build/.
#
#   scripts/setup.sh                 install + configure + build
#   SPINDLE_SETUP_ONLY_DEPS=1 ...    install only
#   SPINDLE_CMAKE_ARGS="-DSPINDLE_CUDA=OFF" scripts/setup.sh   extra configure flags
set -euo pipefail

cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config git ca-certificates
  libdnnl-dev            # oneDNN: matrix products (AMX / AVX-512 / AVX2 kernels)
  nlohmann-json3-dev     # JSON
  libcpp-httplib-dev     # HTTP server
  libspdlog-dev libfmt-dev
  libcli11-dev           # command line
  libpcre2-dev           # tokenizer pre-split regexes
  libicu-dev             # tokenizer NFC normalizer (Qwen2 tokenizers)
  libgtest-dev libgmock-dev libbenchmark-dev
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ "${SPINDLE_SETUP_ONLY_DEPS:-0}" == "1" ]]; then exit 0; fi

BUILD_DIR="${SPINDLE_BUILD_DIR:-build}"
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SPINDLE_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
