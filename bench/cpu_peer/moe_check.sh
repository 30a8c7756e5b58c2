#!/usr/bin/env bash
# Spindle against llama.cpp on the same mixture-of-experts GGUF files (issue 48, GGUF item):
# bench/results/2026-12-07-devvm-moe-gguf-llamacpp/README.md says what each row is.
#
#   bench/cpu_peer/moe_check.sh models        into $MODELS: copies of the HF goldens
#                                             tests/golden/{mixtral,qwen2-moe}-bf16 and a random
#                                             all-sparse Qwen3-MoE of hidden 256 / experts of width
#                                             256 (make_moe_model.py: rows whole Q4_K blocks), each
#                                             as bf16 GGUF (st_to_gguf.py, checked bit for bit with
#                                             --verify) and llama-quantize's Q8_0 and Q4_K_M of it
#   bench/cpu_peer/moe_check.sh check OUT     per file `spindle serve` and llama-server (each with
#                                             its defaults: Spindle bf16 KV and auto matmul
#                                             precision, llama.cpp f16 KV), and
#                                             - for the two HF goldens, golden_vs_server.py for each
#                                               server: its distance from HF transformers on the
#                                               golden prompts (top-5 logprobs at the first
#                                               position, leading greedy ids equal to HF's 32);
#                                             - check_logits.py, Spindle against llama-server on the
#                                               golden prompts (HF goldens) and on 8 random prompts
#                                               (32 greedy tokens, top-5 logprobs);
#                                             into OUT/check.txt and OUT/*.jsonl
#   SPINDLE_ARGS="--kv-cache-dtype f32 --matmul-precision exact" runs Spindle as HF computes
#   (f32 KV, f32 activations); LLAMA_ARGS="-ctk f32 -ctv f32" gives llama-server an f32 KV cache.
#
# (tests/golden/qwen3-moe-bf16 has a dense layer, mlp_only_layers [1], which llama.cpp's qwen3moe
# cannot load: Spindle's own test gguf_moe_test covers it.)
# Environment: LLAMA_CPP (a llama.cpp tree with build/bin/llama-server and llama-quantize), MODELS
# (default /work/peer/models/moe), THREADS (default 2), TOLERANCE (default 0.15 nats, see the
# README), BUILD (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to the llama.cpp tree}"
MODELS=${MODELS:-/work/peer/models/moe}
THREADS=${THREADS:-2}
TOLERANCE=${TOLERANCE:-0.15}
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}  # needs numpy (Debian's python3-numpy)
LB=$LLAMA_CPP/build/bin
export PYTHONPATH=$LLAMA_CPP/gguf-py SPINDLE_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
NAMES="mixtral qwen2-moe qwen3moe-256"
. bench/cpu_peer/servers.sh

make_models() {
  mkdir -p "$MODELS"
  for m in mixtral qwen2-moe; do
    rm -rf "${MODELS:?}/$m" && mkdir -p "$MODELS/$m"
    cp "tests/golden/$m-bf16/config.json" "tests/golden/$m-bf16/model.safetensors" "$MODELS/$m/"
  done
  $PY bench/cpu_peer/make_moe_model.py "$MODELS/qwen3moe-256" --layers 2 --hidden 256 --experts 8 --top-k 2 \
    --expert-width 256 --seed 1
  for m in $NAMES; do
    $PY bench/cpu_peer/st_to_gguf.py "$MODELS/$m" "$MODELS/$m-bf16.gguf" --write-tokenizer
    $PY bench/cpu_peer/st_to_gguf.py "$MODELS/$m" "$MODELS/$m-bf16.gguf" --verify
    "$LB/llama-quantize" "$MODELS/$m-bf16.gguf" "$MODELS/$m-q8_0.gguf" Q8_0 2 >"$MODELS/$m-q8_0.log" 2>&1
    "$LB/llama-quantize" "$MODELS/$m-bf16.gguf" "$MODELS/$m-q4_k_m.gguf" Q4_K_M 2 >"$MODELS/$m-q4_k_m.log" 2>&1
  done
  (cd "$MODELS" && sha256sum ./*.gguf > SHA256SUMS)
}

check() {
  local out=$1 rc=0
  mkdir -p "$out"
  echo "date $(date -u +%FT%TZ); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); spindle $(git rev-parse --short HEAD)" \
    "SPINDLE_ARGS='${SPINDLE_ARGS:-}' LLAMA_ARGS='${LLAMA_ARGS:-}'" \
    | tee "$out/check.txt"
  for m in $NAMES; do
    for t in bf16 q8_0 q4_k_m; do
      local f=$MODELS/$m-$t.gguf
      # shellcheck disable=SC2086
      start_spindle 8391 "$out/$m-$t-spindle.log" "$f" ${SPINDLE_ARGS:-}
      # shellcheck disable=SC2086
      start_llama 8392 "$out/$m-$t-llama.log" "$f" -c 2048 -np 1 ${LLAMA_ARGS:-}
      if [ -f "tests/golden/$m-bf16/golden.json" ]; then
        for who in spindle:8391:openai llama:8392:llama; do
          IFS=: read -r name port api <<<"$who"
          $PY bench/cpu_peer/golden_vs_server.py --url "http://127.0.0.1:$port" --api "$api" \
            --golden "tests/golden/$m-bf16/golden.json" --tokenizer "$MODELS/$m/tokenizer.json" \
            --label "$name vs HF, $m-$t.gguf" >"$out/$m-$t-$name-vs-hf.jsonl"
          tail -1 "$out/$m-$t-$name-vs-hf.jsonl" | tee -a "$out/check.txt"
        done
        $PY bench/cpu_peer/check_logits.py --reference http://127.0.0.1:8392 --candidate http://127.0.0.1:8391 \
          --vocab 1024 --tolerance "$TOLERANCE" --prompts-from "tests/golden/$m-bf16/golden.json" \
          --label "spindle vs llama-server on the HF golden prompts, $m-$t.gguf" >"$out/$m-$t-golden-prompts.jsonl" || rc=1
        tail -1 "$out/$m-$t-golden-prompts.jsonl" | tee -a "$out/check.txt"
      fi
      $PY bench/cpu_peer/check_logits.py --reference http://127.0.0.1:8392 --candidate http://127.0.0.1:8391 \
        --vocab 1024 --tolerance "$TOLERANCE" --label "spindle vs llama-server, $m-$t.gguf" \
        >"$out/$m-$t.jsonl" || rc=1
      tail -1 "$out/$m-$t.jsonl" | tee -a "$out/check.txt"
      stop_servers
    done
  done
  return $rc
}

case "${1:-}" in
  models) make_models ;;
  check) check "${2:?OUT directory}" ;;
  *) echo "usage: $0 models | check OUT"; exit 2 ;;
esac
