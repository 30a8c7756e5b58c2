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
  # oneDNN's CMake package (dnnl-config.cmake) calls find_package(OpenCL) at configure time, but
  # libdnnl-dev only *Recommends* these, and we install with --no-install-recommends.
  ocl-icd-opencl-dev opencl-headers
  nlohmann-json3-dev     # JSON
  libboost1.81-dev       # Boost.Beast/Asio (header-only): the HTTP server
  libcpp-httplib-dev     # HTTP client of the end-to-end server tests
  libspdlog-dev libfmt-dev
  libcli11-dev           # command line
  libpcre2-dev           # tokenizer pre-split regexes
  libicu-dev             # tokenizer NFC normalizer (Qwen2 tokenizers)
  libgtest-dev libgmock-dev libbenchmark-dev
  patchelf               # scripts/bundle.sh: RPATH $ORIGIN/../lib on the bundled binaries
  python3-yaml           # tests/deploy/manifests_test.py parses deploy/kubernetes
  python3-jinja2         # tests/jinja/check_corpus.py: jinja2 is the reference renderer of chat templates
  zlib1g-dev             # tests/support/gunzipped_file: golden GGUF files are stored .gz (tests/golden/gguf)
  python3-jsonschema     # tests/grammar: independent validator of generated JSON documents
  python3-numpy          # bench/cpu_peer: st_to_gguf.py, f64_reference.py (float64 forward over GGUF weights)
  libopenblas0-pthread   # f64_reference.py's products (f64_check.sh puts it on LD_LIBRARY_PATH; the
                         # system BLAS alternative stays netlib's)
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
# node and npm for the OpenAI Node client test (tests/node), unless some install already has them
# (a NodeSource nodejs ships npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The locked npm packages of tests/node (the openai client, the Vercel AI SDK), when absent or older
# than the lock file. Without them the Node client tests skip, so a failure here (offline) is a warning.
if [[ ! -f tests/node/node_modules/.package-lock.json ||
      tests/node/package-lock.json -nt tests/node/node_modules/.package-lock.json ]]; then
  echo "setup: npm ci --prefix tests/node"
  npm ci --prefix tests/node --no-audit --no-fund || echo "setup: warning: npm ci failed; the Node client tests will skip"
fi

if [[ "${SPINDLE_SETUP_ONLY_DEPS:-0}" == "1" ]]; then exit 0; fi

BUILD_DIR="${SPINDLE_BUILD_DIR:-build}"
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SPINDLE_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
