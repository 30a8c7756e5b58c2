#!/usr/bin/env bash
# Time to first token of `spindle generate` from the process start, on a random-weight bf16
# Llama-3.2-1B-shaped model (build/bin/make_bench_model; ~2.5 GB, written once to MODEL_DIR),
# with a fresh on-disk cache: run 1 validates the attention backends and measures the workspace,
# runs 2..RUNS find both in the cache. The first token is the first byte on stdout after the
# echoed prompt (generate prints the prompt when the request is submitted).
#
#   bench/start_time.sh [OUT_FILE]
#   MODEL_DIR=/tmp/spindle-1b RUNS=4 GEN_ARGS="--threads 2" bench/start_time.sh
#
# The model's tokenizer is models/kjv-tiny's with its vocabulary padded to the 1B shape's 128256
# ids (decode-only entries, so every sampled id detokenizes); the prompt is tokenized by it.
set -euo pipefail
cd "$(dirname "$0")/.."
spindle=${SPINDLE:-build/bin/spindle}
model=${MODEL_DIR:-/tmp/spindle-bench-1b}
runs=${RUNS:-4}
out=${1:-}
if [ ! -f "$model/model.safetensors" ]; then
  build/bench/make_bench_model "$model" >&2
fi
if [ ! -f "$model/tokenizer.json" ]; then
  python3 - "$model" <<'PY'
import json, sys
t = json.load(open("models/kjv-tiny/tokenizer.json"))
vocab = t["model"]["vocab"]
size = json.load(open(sys.argv[1] + "/config.json"))["vocab_size"]
letters = "abcdefghijklmnopqrstuvwxyz"
i = 0
while len(vocab) < size:
    n, s = i, ""
    for _ in range(4):
        s += letters[n % 26]
        n //= 26
    i += 1
    word = "\u0120~" + s  # byte-level: " ~" + 4 letters, never produced by the merges
    if word not in vocab:
        vocab[word] = len(vocab)
json.dump(t, open(sys.argv[1] + "/tokenizer.json", "w"))
PY
fi
cache=$(mktemp -d /tmp/spindle-start-cache.XXXXXX)
report=$(mktemp /tmp/spindle-start-report.XXXXXX)
trap 'rm -rf "$cache" "$report"' EXIT
{
  echo "date $(date -u +%FT%TZ); host $(uname -n); $(nproc) cores;$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); model $model (random bf16, Llama-3.2-1B shape)"
  echo "command: SPINDLE_CACHE_DIR=<fresh> $spindle generate $model -p 'And God said' -n 8 --temperature 0 --ignore-eos ${GEN_ARGS:-}"
} >"$report"
for run in $(seq 1 "$runs"); do
  SPINDLE_CACHE_DIR=$cache python3 - "$spindle" "$model" "$run" ${GEN_ARGS:-} >>"$report" <<'PY'
import subprocess, sys, time
spindle, model, run, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
prompt = "And God said"
start = time.monotonic()
p = subprocess.Popen([spindle, "generate", model, "-p", prompt, "-n", "8", "--temperature", "0", "--ignore-eos"] + extra,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
seen, first = b"", None
while True:
    b = p.stdout.read(1)
    if not b:
        break
    seen += b
    if first is None and len(seen) > len(prompt):
        first = time.monotonic() - start
err = p.stderr.read().decode()
p.wait()
end = time.monotonic() - start
if p.returncode != 0 or first is None:
    sys.exit(f"run {run} failed ({p.returncode}): {err[-2000:]}")
notes = []
if "[from cache]" in err: notes.append("attention selection from the cache")
if "validating attention backend" in err: notes.append("attention backends validated")
notes.append("workspace from the cache" if "cached: measured by an earlier start" in err else "workspace measured")
print(f"run {run}: first token {first:.2f} s after start, exit {end:.2f} s; " + "; ".join(notes))
PY
done
cat "$report"
if [ -n "$out" ]; then cp "$report" "$out"; fi
