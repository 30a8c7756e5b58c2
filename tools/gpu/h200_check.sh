#!/usr/bin/env bash
# The GPU host's checks, in one go (the device tool runs it from the repo root with the bundle
# archive carried in .device/). Writes every log under /tmp/gpu-out and packs them into
# $OUT/gpu-out.tar.gz (the device tool brings back at most 8 files):
#   env.txt          GPU, driver, cuDNN/cuBLAS found
#   attention.txt    tests/cuda/cuda_attention_test (all CUDA backends vs the float64 reference)
#   model.txt        tests/cuda/cuda_model_test (HF goldens on the GPU)
#   memcheck.txt     compute-sanitizer memcheck over the attention grid's subset ($MEMCHECK_FILTER)
#   doctor*.txt      spindle doctor --device cuda:0 (bf16, fp16 KV)
#   bench.md         bench/run_cuda_bench.sh (Spindle vs torch SDPA)
#   plan_gpu, generate_gpu/cpu, serve, http   a golden model served from the GPU (step "serving")
#   quickbench.txt   bench_attention_cuda in one process (Spindle's kernels), spindle_bench.json
#   torchbench.txt   bench/torch_sdpa.py in one process (the peer), torch_bench.json
#   sampler, engine  tests/cuda/cuda_sampler_test, cuda_engine_test (device sampling, CUDA graphs; prompt logprobs
#                    and embeddings: Cuda/HostRowsEngine.*)
#   splits           tests/cuda/split_policy_test (flash decode's split sizes measured at start, kernels/cuda/split_policy.h)
#   fp8_*, memcheck_fp8*  tests/cuda/cuda_gemv_fp8_test (gemv_fp8 at 1-8 rows, gemv_fp8_mma at 1-32), cuda_fp8_join_test
#                    (joined q|k|v, gate|up FP8 weights through every product vs float64),
#                    cuda_fp8_model_test, bench_gemv_fp8 (1-32 rows vs bf16 gemv16/cuBLAS and the copy
#                    bandwidth), memcheck over the model test and the mma cases (step fp8)
#   moe_*, memcheck_moe*  tests/cuda/cuda_moe_kernels_test (routing, grouping, grouped expert products vs float64;
#                    graph replay), cuda_moe_model_test (the MoE HF goldens on CUDA, graphs, verify steps),
#                    bench_moe_cuda (one Qwen3-30B-A3B layer's block at 1-1024 rows vs the bytes of the experts
#                    it selected; at <= 32 rows the small-step path beside the general one), compute-sanitizer
#                    memcheck over the kernel test and one golden, racecheck over CudaMoeFused.* (step moe, issue 48)
#   fp8_golden/      tools/golden/make_fp8_golden.py: a block-FP8 folder and HF transformers' FP8 logits on it
#   embed_golden.json tools/golden/make_embedding_golden.py: sentence-transformers' embeddings of the Qwen3 golden folder
#   fp8lt_*, memcheck_fp8lt  tests/cuda/cuda_fp8_lt_test (cuBLASLt FP8 vs float64), cuda_fp8_registry_test
#                    (the FP8 prefill entries checked and timed on the 8B shapes), bench_fp8_lt
#                    (prefill FP8 vs cuBLAS bf16 at 512..8192 rows), memcheck (step fp8lt)
#   cpu_*            the CPU kernel tests (amx_instructions, quant_linear, linear, linear_selection, linear_registry,
#                    paged_attention) on this host's Xeon (AMX), when bundled (step cpu_amx)
#   templates        tests/jinja/transformers_check.py: jinja_oracle.py vs transformers' renderer
#   ops              tests/cuda/cuda_ops_test (norms, SwiGLU and their 16-bit copies vs the CPU kernels; gemv16)
#   server_cuda      tests/server/server_cuda_test: `serve --device cuda:0` greedy over HTTP vs HF, graphs/eager/CPU;
#                    echo + logprobs vs HF's row, prompt_logprobs, /v1/embeddings vs the CPU server's
#   gemv.txt         bench_gemv16: small-batch bf16 products, gemv16 vs cuBLAS, vs the copy bandwidth
#   memcheck_new     compute-sanitizer memcheck over those two
#   memcheck_ops     compute-sanitizer memcheck over cuda_ops_test (row_norm_vec, Out16 copies, gemv16)
#   memcheck_overlap compute-sanitizer memcheck over the overlap schedule's engine test (queued samplings, pending tokens)
#   memcheck_decode  compute-sanitizer memcheck over flash decode's 16-bit output copy, its long split test and verify rows
#   fp8kv            the fp8_e4m3 KV cache: cuda_attention_test's fp8 cases (cuda_reference and cuda_flash vs the
#                    float64 reference over the same FP8 pages, the CUDA writer bit for bit), then (MEMCHECK!=0)
#                    compute-sanitizer memcheck over cuda_flash's fp8 decode and prefill cases
#   e2e/             bench/e2e_gpu/run.sh (the 8B shape served; E2E_TIMEOUT, and run.sh's knobs)
#   structured/      bench/e2e_gpu/structured_rows.sh: a json_schema constraint's cost at C=1 and 32 on the
#                    8B shape, plain and constrained alternated (issue 44; STRUCTURED_TIMEOUT)
#   early.jsonl/.md  bench_spec_verify decode/verify of the graph-replayed step at EARLY_SETS contexts and batches
#   spec_verify*     bench_spec_verify on the 8B shape: verify (1 + k tokens) vs decode, batch 1 and 8
#   profile_prefill.md  one 8000-token prefill forward of the 8B shape kernel by kernel (ncu; step profile_prefill)
#   profile_*.md     one decode forward of the 8B shape kernel by kernel (ncu; tools/gpu/kernel_profile.py),
#                    and the median verify forward against it
#   ncu_gemv_*.txt   ncu sections (speed of light, memory, warp stalls, occupancy) of chosen bench_gemv16 launches
#   spec-cpu/        bench/spec/run.sh on this host's CPU (SPEC_ROUNDS, SPEC_TIMEOUT)
#   dp.txt, dp_check_dp{1,2}.log   tools/gpu/dp_check.py: serve --dp-size 2 with both ranks on GPU 0
#                    (each rank's KV plan half of one rank's, dp 1 greedy outputs, both ranks serve)
# MEMCHECK=0 leaves out the fp8 and fp8lt steps' compute-sanitizer runs.
# STEPS (default "env attention model memcheck doctor bench") picks steps; each has a time limit
# so one command stays inside the device tool's 10 minutes.
set -uo pipefail
out=/tmp/gpu-out
rm -rf "$out"
mkdir -p "$out"
pack() { [[ -n ${OUT:-} ]] && tar -czf "$OUT/gpu-out.tar.gz" -C /tmp gpu-out; }
trap pack EXIT
steps=${STEPS:-env attention model memcheck doctor bench}

# Compiled-in source paths (goldens, fixtures) point at /work/main.
if [[ ! -e /work/main ]]; then mkdir -p /work && ln -s "$PWD" /work/main; fi
if [[ -f .device/bundle.tar.xz ]]; then tar -xJf .device/bundle.tar.xz; fi
# A bundle split over calls (the tree plus one carry must stay under 64 MiB): .device/bundle.partNN
if compgen -G ".device/bundle.part*" >/dev/null; then cat .device/bundle.part* | tar -xJf - && rm -rf .bundle && mv .bundle_s .bundle; fi
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
nvlibs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="${nvlibs}${LD_LIBRARY_PATH:-}"
export SPINDLE_CUDNN_LIBRARY=$(ls "$site"/nvidia/cudnn/lib/libcudnn.so.9 2>/dev/null | head -1)
export SPINDLE_BINARY=$PWD/.bundle/bin/spindle
export SPINDLE_CACHE_DIR=/tmp/spindle-cache
bin=.bundle/bin

has() { [[ " $steps " == *" $1 "* ]]; }
start=$SECONDS
run() {  # run NAME TIMEOUT CMD...: output to $out/NAME.txt, its tail to stdout
  local name=$1 limit=$2; shift 2
  # DEADLINE (s): later steps are skipped, so the whole command ends inside the device's limit.
  if (( SECONDS - start > ${DEADLINE:-540} )); then echo "== $name skipped: past the deadline" | tee "$out/$name.txt"; return; fi
  echo "== $name: $*" | tee "$out/$name.txt"
  timeout "$limit" "$@" >>"$out/$name.txt" 2>&1
  echo "== $name exit $?" | tee -a "$out/$name.txt"
  case $name in
    doctor*|quickbench|torchbench|plan*|generate*) tail -30 "$out/$name.txt" ;;
    gemv) tail -24 "$out/$name.txt" ;;
    moe_bench) tail -14 "$out/$name.txt" ;;
    fp8lt_bench) tail -26 "$out/$name.txt" ;;
    fp8_gemv_bench) tail -36 "$out/$name.txt" ;;
    fp8_join) grep -E "FAILED|PASSED|rror|Failure|Expected|Which is|of tolerance|cublaslt" "$out/$name.txt" | head -80 ;;
    fp8_gemv) grep -E "FAILED|PASSED|rror|Failure|Expected|Which is|\[ gemv_fp8" "$out/$name.txt" | head -90 ;;
    fp8lt_*) grep -E "FAILED|PASSED|rror|Failure|Expected|Which is|max \||unavailable|: (fp8|cublas)" "$out/$name.txt" | head -80 ;;
    *) grep -E "FAILED|PASSED|ERROR SUMMARY|rror|Failure|Expected|Which is|max abs" "$out/$name.txt" | head -60 ;;
  esac
  pack  # after every step: a command killed at the device's limit still returns what it has
}

if has env; then
  { nvidia-smi; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; echo "cudnn=$SPINDLE_CUDNN_LIBRARY";
    python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())';
    ldd $bin/spindle; } >"$out/env.txt" 2>&1
  head -20 "$out/env.txt"
fi
has attention && run attention ${ATTENTION_TIMEOUT:-300} $bin/cuda_attention_test --gtest_brief=1 "--gtest_filter=${ATTENTION_FILTER:-*}"
has cudnn && SPINDLE_CUDNN_RAGGED=0 run cudnn_padded 120 $bin/cuda_attention_test --gtest_brief=1 "--gtest_filter=*cudnn*"
has cudnn_ragged && SPINDLE_CUDNN_RAGGED=1 run cudnn_ragged 120 $bin/cuda_attention_test --gtest_brief=1 "--gtest_filter=*cudnn*"
has model && run model 100 $bin/cuda_model_test --gtest_brief=1 "--gtest_filter=${MODEL_FILTER:-*}"
has sampler && run sampler 100 $bin/cuda_sampler_test --gtest_brief=1
has ops && run ops 60 $bin/cuda_ops_test --gtest_brief=1
has splits && run splits 120 $bin/split_policy_test --gtest_brief=1  # flash decode's start-time split measurement
has server_cuda && run server_cuda 150 $bin/server_cuda_test --gtest_brief=1  # greedy over HTTP on the GPU vs HF and the CPU
has gemv && run gemv 150 $bin/bench_gemv16 --reps 20  # gemv16 vs cuBLAS, 8B projection shapes, 1-16 rows
has engine && run engine 200 $bin/cuda_engine_test "--gtest_filter=${ENGINE_FILTER:-*}"
if has fp8; then  # issue 47: the FP8 decode product and FP8 models on CUDA against the CPU, memcheck over both
  run fp8_gemv 120 $bin/cuda_gemv_fp8_test --gtest_brief=1
  run fp8_join 120 $bin/cuda_fp8_join_test --gtest_brief=1  # q|k|v, gate|up joined (model/fp8_join.h) vs float64
  run fp8_gemv_bench 200 $bin/bench_gemv_fp8 --reps 10
  run fp8_model 200 $bin/cuda_fp8_model_test --gtest_brief=1
  [[ ${MEMCHECK:-1} == 1 ]] && run memcheck_fp8_mma 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_gemv_fp8_test --gtest_brief=1 \
    "--gtest_filter=*Mma*"
  [[ ${MEMCHECK:-1} == 1 ]] && run memcheck_fp8 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_fp8_model_test --gtest_brief=1 \
    "--gtest_filter=*llama_gqa_f32_block128*:*llama_gqa_f32_ct_channel*:*QuantizeAtLoad*"
  [[ ${MEMCHECK:-1} == 1 ]] && run memcheck_fp8_join 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_fp8_join_test --gtest_brief=1
fi
if has fp8lt; then  # issue 47: prefill on the FP8 tensor cores (cuBLASLt), the registry's checks, the bench
  run fp8lt_test 150 $bin/cuda_fp8_lt_test --gtest_brief=1
  run fp8lt_registry 240 $bin/cuda_fp8_registry_test --gtest_brief=1
  run fp8lt_bench 200 $bin/bench_fp8_lt --reps 5
  [[ ${MEMCHECK:-1} == 1 ]] && run memcheck_fp8lt 150 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_fp8_lt_test --gtest_brief=1 \
    "--gtest_filter=*/per_tensor:*/per_channel:*/block128_partial:*/block128_partial_fast"
fi
# issue 47 item 4: a 128x128-block FP8 folder written from the format's definition, transformers' own FP8
# path on it against a float64 forward over the dequantized weights (fp8_golden/ holds folder and golden.json)
if has fp8_golden; then
  run fp8_golden 300 python3 tools/golden/make_fp8_golden.py --src tests/golden/llama-gqa-f32 --out "$out/fp8_golden"
fi
# issue 46 item 6: /v1/embeddings goldens by sentence-transformers itself (last-token and mean pooling over
# the random Qwen3 golden folder; embed_golden.json is what tests/golden/embeddings/ takes)
if has embed_golden; then
  run embed_golden 200 python3 tools/golden/make_embedding_golden.py --src tests/golden/qwen3-qknorm-f32 --out "$out/embed_golden.json"
fi
# issue 45: the CPU kernel tests that skip on the dev VMs (this host's Xeon has AMX), when bundled
if has cpu_amx; then
  grep -o -w -E 'amx_int8|amx_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ' >"$out/cpu_flags.txt"
  for t in amx_instructions_test quant_linear_test linear_test linear_selection_test linear_registry_test paged_attention_test; do
    [[ -x $bin/$t ]] && run "cpu_$t" 120 $bin/$t --gtest_brief=1 "--gtest_filter=${CPU_FILTER:-*}"
  done
  # A binary that died of a signal (SIGILL 132, SIGSEGV 139): each of its tests alone, to name the
  # ones that die, and the first under gdb (the faulting instruction), where gdb is installed.
  for t in quant_linear_test linear_registry_test; do
    grep -q "exit 13[2-9]" "$out/cpu_$t.txt" 2>/dev/null || continue
    { first=""
      for name in $($bin/$t --gtest_list_tests --gtest_filter="${CPU_FILTER:-*}" | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
        timeout 60 $bin/$t --gtest_brief=1 --gtest_filter="$name" >/dev/null 2>&1; rc=$?
        echo "$rc $name"; [[ $rc -ge 128 && -z $first ]] && first=$name
      done
      if [[ -n $first ]] && command -v gdb >/dev/null; then
        timeout 120 gdb -q -batch -ex run -ex bt -ex 'x/3i $pc' -ex 'info registers rip' --args $bin/$t --gtest_filter="$first"
      fi; } >"$out/cpu_${t}_each.txt" 2>&1
  done
  run cpu_doctor 200 $bin/spindle doctor --device cpu --heads 32 --kv-heads 8 --head-dim 64 --linear-shape 2048x2048:Q4_K --linear-shape 2048x2048:BF16
fi
# issue 46: the Jinja oracle (tests/jinja/jinja_oracle.py) against transformers' own renderer on the corpus
has templates && run templates 200 python3 tests/jinja/transformers_check.py
if has memcheck_ops; then  # the norms, SwiGLU with their 16-bit copies, gemv16
  run memcheck_ops 120 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_ops_test --gtest_brief=1
fi
if has memcheck_new; then  # the device sampler's kernel and graph-replayed steps
  run memcheck_sampler 150 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_sampler_test --gtest_brief=1
  run memcheck_engine 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_engine_test --gtest_brief=1 \
    "--gtest_filter=*GraphsAndDeviceSampling*llama_gqa_bf16:*GraphsAndDeviceSampling*qwen3_qknorm_f32"
fi
if has memcheck_overlap; then  # the overlap schedule: queued samplings, pending tokens copied on the device
  run memcheck_overlap 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_engine_test --gtest_brief=1 \
    "--gtest_filter=*OverlapSchedule*llama_gqa_bf16:*GraphsAndDeviceSampling*qwen2_tied_bf16"
fi
if has memcheck_decode; then  # flash decode's split/merge kernels with the 16-bit output copy
  run memcheck_decode 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_attention_test --gtest_brief=1 \
    "--gtest_filter=*FlashDecodeWritesTheRequestedOutputCopy*:*LongDecodeSplitsOfDifferentLengths/cuda_flash*:*VerifyShapedStepsOfDifferentLengths/cuda_flash*"
fi
if has fp8kv; then  # the FP8 KV cache's CUDA kernels (flash decode and prefill convert E4M3 pages to f16 stages)
  run fp8kv 200 $bin/cuda_attention_test --gtest_brief=1 "--gtest_filter=*fp8*:*Registry*"
  [[ ${MEMCHECK:-1} != 0 ]] && run memcheck_fp8kv 200 compute-sanitizer --tool memcheck --error-exitcode 1 \
    $bin/cuda_attention_test --gtest_brief=1 "--gtest_filter=*cuda_flash_fp8_d128_page16*:*cuda_flash_fp8_d80_page1*"
fi
if has e2e; then  # bench/e2e_gpu: the 8B shape served, against the bound and HF transformers
  SPINDLE=$PWD/$bin/spindle RESULTS=$out/e2e timeout ${E2E_TIMEOUT:-560} bash bench/e2e_gpu/run.sh >"$out/e2e.txt" 2>&1
  echo "== e2e exit $?"; grep -vE "^\[" "$out/e2e.txt" | tail -40
fi
if has structured; then  # issue 44: what a json_schema constraint costs the 8B shape served at C=1 and 32
  SPINDLE=$PWD/$bin/spindle RESULTS=$out/structured timeout ${STRUCTURED_TIMEOUT:-420} \
    bash bench/e2e_gpu/structured_rows.sh >"$out/structured.txt" 2>&1
  tail -45 "$out/structured.txt"; pack
fi
if has early; then  # the graph-replayed decode and verify step, graphs planned as served (--max-model-len 8448)
  work=${WORK:-/tmp/e2e-work}
  [[ -f $work/model/model.safetensors ]] || timeout 300 python3 bench/e2e_gpu/make_model.py "$work/model" --shape 8b >"$out/early_model.txt" 2>&1
  # A config is env settings; default = none (the A/B switches are gone: util/switches.cc names each with its
  # verdict; flash decode's split sizes are measured at start, cuda_attention_test *SplitMeasurement*).
  # EARLY_SETS: "context:batches:configs:rounds" groups, separated by ';'.
  IFS=';' read -ra early_sets <<<"${EARLY_SETS:-512:1 2 8:default:2;2048:1 8:default:1;8000:1 8:default:1}"
  for set in "${early_sets[@]}"; do
    IFS=: read -r ctx batches configs rounds <<<"$set"
    for round in $(seq 1 "$rounds"); do
      for b in $batches; do
        for config in $configs; do
          envs=()  # a future A/B config adds its settings here
          name=early_c${ctx}_r${round}_b${b}_${config}
          env "${envs[@]}" timeout 60 $bin/bench_spec_verify --model "$work/model" --device cuda --context $ctx --k 4 \
            --batch $b --steps 40 --decode-backend cuda_flash --max-model-len 8448 >"$out/$name.txt" 2>&1
          echo "{\"config\": \"$config\", \"round\": $round, \"result\": $(grep "^{" "$out/$name.txt" | tail -1)}" >>"$out/early.jsonl"
        done
      done
    done
  done
  python3 - "$out/early.jsonl" <<'PY' | tee "$out/early.md"
import json, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    res = r["result"]
    rows[(res["context"], res["batch"], r["config"])].append((res["decode_ms"], res["verify_ms"]))
print("| context | batch | config | decode ms (rounds) | verify ms (rounds) |")
print("|---|---|---|---|---|")
for (c, b, k), v in sorted(rows.items()):
    print(f"| {c} | {b} | {k} | {' / '.join(f'{d:.3f}' for d, _ in v)} | {' / '.join(f'{x:.3f}' for _, x in v)} |")
PY
fi
if has spec_verify; then  # bench/spec: a verify step (1 + k tokens) against a decode step, 8B shape
  work=${WORK:-/tmp/e2e-work}
  [[ -f $work/model/model.safetensors ]] || timeout 300 python3 bench/e2e_gpu/make_model.py "$work/model" --shape 8b >"$out/spec_model.txt" 2>&1
  for b in 1 8; do
    for k in 4 2; do
      run spec_verify_b${b}_k${k} 120 $bin/bench_spec_verify --model "$work/model" --device cuda --context 512 --k $k --batch $b --steps 40
      grep "^{" "$out/spec_verify_b${b}_k${k}.txt" | tail -1 >>"$out/spec_verify.jsonl"
    done
  done
  run spec_verify_eager_b1 120 $bin/bench_spec_verify --model "$work/model" --device cuda --context 512 --k 4 --batch 1 --steps 40 --eager
  grep "^{" "$out/spec_verify_eager_b1.txt" | tail -1 >>"$out/spec_verify.jsonl"
  for b in 1 8; do  # the verify step eager, the decode step from its graph (before verify graphs)
    run spec_verify_eagerverify_b${b} 120 $bin/bench_spec_verify --model "$work/model" --device cuda --context 512 --k 4 \
      --batch $b --steps 40 --eager-verify
    grep "^{" "$out/spec_verify_eagerverify_b${b}.txt" | tail -1 >>"$out/spec_verify.jsonl"
  done
  cat "$out/spec_verify.jsonl"
fi
if has ncu_gemv; then  # ncu sections of chosen gemv16 launches in bench_gemv16 (NCU_GEMV_SKIPS: launch indices
  # among gemv16_kernel launches; bench order: shapes qkv, o, gate_up, down, lm_head; rows 1 2 3 4 5 6 8; outs 1 2 4;
  # 22 launches each, so shape s, row index r, outs index k starts at s*462 + r*66 + k*22)
  for skip in ${NCU_GEMV_SKIPS:-310 1696}; do
    run ncu_gemv_$skip 200 ncu --kernel-name regex:gemv16_kernel --launch-skip $skip --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats $bin/bench_gemv16 --reps 20
    grep -E "gemv16_kernel|Throughput|Stall|Warp Cycles|Issued|Eligible|Occupancy|Registers|Duration|Bandwidth|Busy" \
      "$out/ncu_gemv_$skip.txt" | head -60
  done
fi
if has profile; then  # one decode forward of the 8B shape, kernel by kernel (ncu), for each decode backend
  work=${WORK:-/tmp/e2e-work}
  [[ -f $work/model/model.safetensors ]] || timeout 300 python3 bench/e2e_gpu/make_model.py "$work/model" --shape 8b >"$out/profile_model.txt" 2>&1
  for backend in ${PROFILE_BACKENDS:-cudnn_sdpa cuda_flash}; do
    run step_$backend 120 $bin/bench_spec_verify --model "$work/model" --device cuda --context 512 --k 4 --batch 1 --steps 30 --decode-backend $backend
    run ncu_$backend ${PROFILE_TIMEOUT:-240} ncu --clock-control none --cache-control none --print-units base --csv --page raw \
      --metrics gpu__time_duration.sum $bin/bench_spec_verify --model "$work/model" --device cuda --context 512 --k 4 \
      --batch 1 --steps 1 --eager --decode-backend $backend
    python3 tools/gpu/kernel_profile.py "$out/ncu_$backend.txt" >"$out/profile_$backend.md" 2>&1
    head -40 "$out/profile_$backend.md"
  done
fi
if has profile_prefill; then  # one prefill forward of PREFILL_TOKENS (8000) tokens, 8B shape, kernel by kernel (ncu)
  work=${WORK:-/tmp/e2e-work}
  [[ -f $work/model/model.safetensors ]] || timeout 300 python3 bench/e2e_gpu/make_model.py "$work/model" --shape 8b >"$out/profile_model.txt" 2>&1
  run ncu_prefill ${PROFILE_TIMEOUT:-240} ncu --clock-control none --cache-control none --print-units base --csv --page raw \
    --metrics gpu__time_duration.sum $bin/bench_spec_verify --model "$work/model" --device cuda --context ${PREFILL_TOKENS:-8000} \
    --k 4 --batch 1 --steps 1 --eager --decode-backend cuda_flash --max-model-len 8448
  python3 tools/gpu/kernel_profile.py --prefill "$out/ncu_prefill.txt" >"$out/profile_prefill.md" 2>&1
  head -30 "$out/profile_prefill.md"
fi
if has spec_cpu; then  # bench/spec on this host's CPU (kjv-tiny + kjv-draft; n-gram on repeating prompts)
  SPINDLE=$PWD/$bin/spindle ROUNDS=${SPEC_ROUNDS:-2} timeout ${SPEC_TIMEOUT:-300} bash bench/spec/run.sh "$out/spec-cpu" >"$out/spec_cpu.txt" 2>&1
  echo "== spec_cpu exit $?"; cat "$out/spec-cpu/summary.md"
fi
if has moe; then  # issue 48: mixtures of experts on CUDA
  run moe_kernels 120 $bin/cuda_moe_kernels_test --gtest_brief=1
  run moe_model 240 $bin/cuda_moe_model_test --gtest_brief=1 "--gtest_filter=${MOE_FILTER:-*}"
  run moe_bench 150 $bin/bench_moe_cuda --reps 20  # one Qwen3-30B-A3B layer's block vs its selected experts' bytes
  if [[ ${MEMCHECK:-1} == 1 ]]; then
    run memcheck_moe 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_moe_kernels_test --gtest_brief=1
    run memcheck_moe_model 200 compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_moe_model_test \
      --gtest_brief=1 "--gtest_filter=*PrefillLogitsAndGreedyDecode*qwen2_moe*:*GraphReplayed*qwen3_moe*"
    # the small-step path's last-block top-k and grouping share memory across warps
    run racecheck_moe 200 compute-sanitizer --tool racecheck --error-exitcode 1 $bin/cuda_moe_kernels_test \
      --gtest_brief=1 "--gtest_filter=CudaMoeFused.*"
  fi
fi
if has dp; then  # issue 17: two DP ranks sharing one GPU, each planning half its memory
  run dp 300 python3 tools/gpu/dp_check.py --spindle $bin/spindle --model tests/golden/llama-gqa-bf16 --device cuda:0 \
    --out "$out" --start-timeout 240
  grep -E "PASS|FAIL" "$out/dp.txt"
fi
if has memcheck; then
  filter=${MEMCHECK_FILTER:-'Grid/CudaAttentionGridTest.MatchesReference/*_bf16_d128_page16:Grid/CudaAttentionGridTest.MatchesReference/cuda_*_f16_d64_page1:Grid/CudaAttentionGridTest.MatchesReference/cuda_*_bf16_d256_page1:Backends/CudaBackendTest.NonCausal*/cuda_*:Backends/CudaBackendTest.LongPrefill*/cuda_*:Backends/CudaBackendTest.LongDecode*/cuda_flash'}
  run memcheck ${MEMCHECK_TIMEOUT:-150} compute-sanitizer --tool memcheck --error-exitcode 1 $bin/cuda_attention_test --gtest_brief=1 "--gtest_filter=$filter"
fi
if has doctor; then
  run doctor 100 $bin/spindle doctor --device cuda:0 --no-backend-cache --backend-validation-timeout 120
  run doctor_fp16 100 $bin/spindle doctor --device cuda:0 --no-backend-cache --kv-cache-dtype fp16 --backend-validation-timeout 120
fi
if has serving; then
  # A golden model (HF fixtures) served from the GPU: plan, greedy generate on GPU and CPU, HTTP.
  model=tests/golden/llama-gqa-bf16
  run plan_gpu 120 $bin/spindle plan $model --device cuda:0
  gen=(generate $model --prompt "The quick brown fox" --max-tokens 24 --temperature 0 --ignore-eos)
  run generate_gpu 120 $bin/spindle "${gen[@]}" --device cuda:0
  run generate_cpu 120 $bin/spindle "${gen[@]}"
  $bin/spindle serve $model --device cuda:0 --port 8123 >"$out/serve.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 90); do curl -sf localhost:8123/health >/dev/null 2>&1 && break; sleep 1; done
  { curl -s localhost:8123/v1/completions -H 'Content-Type: application/json' \
      -d '{"model":"llama-gqa-bf16","prompt":"The quick brown fox","max_tokens":24,"temperature":0,"ignore_eos":true}';
    echo; curl -s localhost:8123/v1/completions -H 'Content-Type: application/json' -d '{"max_tokens":-3}';
    echo; curl -s localhost:8123/metrics | grep -E "^spindle_(kv|requests|generation)" | head -20; } >"$out/http.txt" 2>&1
  kill $pid; wait $pid 2>/dev/null
  cat "$out/http.txt"; grep -E "KV plan|attention:|error" "$out/serve.txt" | head
fi
has quickbench && run quickbench 120 $bin/bench_attention_cuda --min-ms ${BENCH_MIN_MS:-50} --repeats 3 --json "$out/spindle_bench.json"
has torchbench && run torchbench 150 python3 bench/torch_sdpa.py --min-ms ${BENCH_MIN_MS:-50} --repeats 3 --json "$out/torch_bench.json"
if has bench; then
  SPINDLE_BENCH_BIN=$bin/bench_attention_cuda timeout ${BENCH_TIMEOUT:-330} bash bench/run_cuda_bench.sh "$out/bench.md" >"$out/bench_log.txt" 2>&1
  echo "== bench exit $?"; tail -40 "$out/bench.md" 2>/dev/null
fi
