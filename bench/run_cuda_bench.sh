#!/usr/bin/env bash
# Runs the GPU attention benchmark and its peer on the GPU host and writes one markdown report:
#   bench_attention_cuda  (Spindle's cuda_flash and cudnn_sdpa kernels, bench/attention_cuda.cc)
#   bench/torch_sdpa.py   (torch SDPA restricted to FLASH_ATTENTION, then CUDNN_ATTENTION)
# Every (case, backend) runs in its own process under a timeout, so a crash, a hang or a CUDA error
# that breaks the context loses that one row only. Each process measures the copy bandwidth its
# "% of copy BW" is relative to (ratios measured in one run).
#
# usage: bench/run_cuda_bench.sh OUT.md          (from anywhere; paths relative to the caller)
# env:   SPINDLE_BENCH_BIN  the binary (.bundle/bin/bench_attention_cuda, else
#                           build/bench/bench_attention_cuda, under the repository)
#        PYTHON             python with torch (python3)
#        DEVICE             CUDA device ordinal for both (0)
#        BENCH_ARGS         extra flags for both tools, e.g. "--min-ms 100 --repeats 3"
#        CASE_TIMEOUT       seconds per process (300)
#        CUDNN_FROM_TORCH   auto|1|0: put torch's pip cuDNN (nvidia.cudnn) on LD_LIBRARY_PATH for
#                           the Spindle binary (which dlopens cuDNN); auto = only when ldconfig
#                           knows no libcudnn.so.9 (default auto)
# Output: OUT.md, and OUT.raw/ beside it (per-process JSON and the full logs).
set -uo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 OUT.md" >&2; exit 2; }
out=$(realpath -m "$1")
raw="${out%.md}.raw"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python=${PYTHON:-python3}
device=${DEVICE:-0}
bench_args=${BENCH_ARGS:-}
case_timeout=${CASE_TIMEOUT:-300}

bin=${SPINDLE_BENCH_BIN:-}
if [[ -z $bin ]]; then
  for candidate in "$repo/.bundle/bin/bench_attention_cuda" "$repo/build/bench/bench_attention_cuda"; do
    [[ -x $candidate ]] && { bin=$candidate; break; }
  done
fi
[[ -n $bin && -x $bin ]] || { echo "run_cuda_bench: no bench_attention_cuda (set SPINDLE_BENCH_BIN)" >&2; exit 2; }
bin=$(realpath "$bin")

mkdir -p "$(dirname "$out")"
rm -rf "$raw"
mkdir -p "$raw"
log="$raw/run.log"
: > "$raw/commands.txt"

# cuDNN for the Spindle binary: the system's, or torch's pip wheel (the same cuDNN torch uses).
cudnn_note="system libraries (ldconfig) for Spindle's dlopen of cuDNN"
spindle_env=()
mode=${CUDNN_FROM_TORCH:-auto}
system_cudnn=$(ldconfig -p 2>/dev/null | grep 'libcudnn\.so\.9' || true)
if [[ $mode == 1 || ( $mode == auto && -z $system_cudnn ) ]]; then
  # Every lib/ of torch's nvidia.* wheels (cuDNN's sub-libraries may need cuBLAS and NVRTC too).
  torch_libs=$("$python" -c '
import glob, os, nvidia.cudnn
root = os.path.dirname(list(nvidia.cudnn.__path__)[0])
print(":".join(sorted(d for d in glob.glob(os.path.join(root, "*", "lib")) if os.path.isdir(d))))' 2>/dev/null)
  if [[ $torch_libs == *cudnn/lib* ]]; then
    spindle_env=(env "LD_LIBRARY_PATH=$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    cudnn_note="torch's pip nvidia wheels' lib/ folders on LD_LIBRARY_PATH for Spindle's dlopen of cuDNN ($torch_libs)"
  else
    cudnn_note="no libcudnn.so.9 known to ldconfig and no nvidia.cudnn wheel found: cudnn_sdpa may report cuDNN missing"
  fi
fi

# Runs one process: $1 = tag for its files, the rest = the command. Never fails the script.
run_one() {
  local tag=$1; shift
  local cmd=("$@")
  echo "${cmd[*]}" >> "$raw/commands.txt"
  { echo; echo "\$ ${cmd[*]}"; } >> "$log"
  timeout --kill-after=10 "$case_timeout" "${cmd[@]}" > "$raw/$tag.log" 2>&1
  local rc=$?
  cat "$raw/$tag.log" >> "$log"
  echo "$tag $rc" >> "$raw/exit_codes.txt"
  echo "run_cuda_bench: $tag exit $rc"
}

start_date=$(date -u '+%Y-%m-%d %H:%M UTC')
gpu_info=$(nvidia-smi -i "$device" --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,pstate \
  --format=csv 2>&1 || echo "nvidia-smi failed")
nvidia-smi > "$raw/nvidia-smi.txt" 2>&1 || true

spindle_cases=(prefill_b8_s2048 prefill_b2_s8192 decode_b64_kv4096 decode_b8_kv32768)
for c in "${spindle_cases[@]}"; do
  backends=(cuda_flash cudnn_sdpa)
  [[ $c == decode_* ]] && backends+=(cuda_flash_prefill)
  for b in "${backends[@]}"; do
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
    run_one "spindle-$c-$b" "${spindle_env[@]}" "$bin" --device "$device" --case "$c" --backend "$b" \
      --json "$raw/spindle-$c-$b.json" $bench_args
  done
  for b in torch_flash torch_cudnn; do
    # shellcheck disable=SC2086
    run_one "torch-$c-$b" "$python" "$repo/bench/torch_sdpa.py" --device "$device" --case "$c" --backend "$b" \
      --json "$raw/torch-$c-$b.json" $bench_args
  done
done

START_DATE=$start_date GPU_INFO=$gpu_info CUDNN_NOTE=$cudnn_note RAW=$raw OUT=$out \
  "$python" - <<'PYEOF'
import glob, json, os

raw, out = os.environ["RAW"], os.environ["OUT"]
codes = dict(line.split() for line in open(os.path.join(raw, "exit_codes.txt")))
commands = open(os.path.join(raw, "commands.txt")).read().strip().splitlines()

def load(tag):
    path = os.path.join(raw, tag + ".json")
    if os.path.exists(path):
        try:
            return json.load(open(path))
        except ValueError as e:
            return {"error": "unreadable JSON: %s" % e}
    rc = codes.get(tag, "?")
    why = {"124": "timed out", "137": "killed (timeout or memory)"}.get(rc, "no JSON written")
    last = ""
    if os.path.exists(os.path.join(raw, tag + ".log")):
        tail = [l.strip() for l in open(os.path.join(raw, tag + ".log"), errors="replace") if l.strip()]
        last = ": " + tail[-1] if tail else ""
    return {"error": "process exit %s (%s)%s; log %s.log" % (rc, why, last, tag)}

def cell_text(s, limit=90):
    s = " ".join(str(s).replace("|", "/").split())
    return s if len(s) <= limit else s[:limit - 3] + "..."

cases = ["prefill_b8_s2048", "prefill_b2_s8192", "decode_b64_kv4096", "decode_b8_kv32768"]
columns = [("spindle", "cuda_flash"), ("spindle", "cudnn_sdpa"), ("spindle", "cuda_flash_prefill"),
           ("torch", "torch_flash"), ("torch", "torch_cudnn")]
results, copies, meta = {}, [], {}
for c in cases:
    for tool, b in columns:
        if b == "cuda_flash_prefill" and c.startswith("prefill"):
            continue
        tag = "%s-%s-%s" % (tool, c, b)
        doc = load(tag)
        if "error" in doc and "rows" not in doc:
            results[(c, b)] = {"case": c, "backend": b, "status": "error", "note": doc["error"]}
            continue
        meta.setdefault(tool, doc)
        cp = doc.get("copy", {})
        copies.append((tool, c, b, cp))
        rows = [r for r in doc.get("rows", []) if r["case"] == c and r["backend"] == b]
        results[(c, b)] = rows[0] if rows else {"case": c, "backend": b, "status": "error", "note": "no row in JSON"}

def metric(r, decode):
    if r.get("status") not in ("ok", "WRONG") or "ms" not in r:
        return "%s: %s" % (r.get("status"), cell_text(r.get("note", ""), 70))
    if decode:
        s = "%.2f TB/s (%.0f%%)" % (r["kv_tbps"], r.get("pct_copy_bw", 0))
    else:
        s = "%.0f TFLOP/s" % r["tflops"]
    s += ", %.3f ms" % r["ms"]
    if r.get("status") == "WRONG":
        s = "**WRONG** " + s
    return s

def rate(r, decode):
    if r.get("status") != "ok" or "ms" not in r:
        return 0
    return r["kv_tbps"] if decode else r["tflops"]

lines = []
w = lines.append
w("# CUDA paged attention: Spindle kernels vs torch SDPA (%s)" % os.environ["START_DATE"])
w("")
w("Benchmarks: `bench/attention_cuda.cc` (target `bench_attention_cuda`) and `bench/torch_sdpa.py`, run by")
w("`bench/run_cuda_bench.sh`; every (case, backend) in its own process, each with its own copy-bandwidth")
w("measurement (its % of copy BW is relative to that). Clocks left alone.")
w("")
w("- Date: %s" % os.environ["START_DATE"])
w("- GPU (nvidia-smi):")
w("")
w("```")
w(os.environ["GPU_INFO"].strip())
w("```")
sp, tp = meta.get("spindle", {}), meta.get("torch", {})
if sp:
    d = sp["device"]
    w("- Spindle: device %s, cc %s, %s SMs, CUDA driver API %s, runtime %s (static)" % (
        d["name"], d["cc"], d["num_sms"], d["driver_version"], d["runtime_version"]))
if tp:
    w("- torch %s, CUDA %s, cuDNN %s" % (tp.get("torch"), tp.get("cuda"), tp.get("cudnn")))
w("- cuDNN for Spindle: %s" % os.environ["CUDNN_NOTE"])
w("- Shape: bf16 KV, 32 query heads over 8 KV heads, head_dim 128, scale 1/sqrt(128); Spindle: paged")
w("  (page 16, page tables a seeded random permutation), q/out f32; torch: contiguous [B, H, S, D] bf16.")
w("  Prefill causal, no cached prefix: FLOPs = 4 * head_dim * heads * sum S(S+1)/2. Decode: one new token,")
w("  kv_len = cached + 1; KV bytes = 2 * batch * kv_len * 8 KV heads * 128 * 2 (8-head bytes for torch too).")
w("- Timing: 3 warm-up launches, median of 5 batches of >= 200 ms of back-to-back launches (CUDA events),")
w("  unless the commands below say otherwise.")
w("")
w("## Copy bandwidth (bytes read + written per second, 2 GiB buffers)")
w("")
w("| method | processes | min | median | max |")
w("|---|---:|---:|---:|---:|")
for tool, key, label in (("spindle", "memcpy_tbps", "cudaMemcpyAsync device-to-device (Spindle processes)"),
                         ("spindle", "kernel_tbps", "16-byte vectorized copy kernel (Spindle processes)"),
                         ("torch", "copy_tbps", "torch tensor copy_ (torch processes)")):
    vals = sorted(cp[key] for t, _, _, cp in copies if t == tool and cp.get(key))
    if vals:
        w("| %s | %d | %.3f TB/s | %.3f TB/s | %.3f TB/s |" % (label, len(vals), vals[0], vals[len(vals) // 2], vals[-1]))
    else:
        w("| %s | 0 | - | - | - |" % label)
w("")
for phase in ("prefill", "decode"):
    decode = phase == "decode"
    cols = [col for col in columns if decode or col[1] != "cuda_flash_prefill"]
    w("## %s: %s" % (phase.capitalize(), "KV TB/s (% of that process's copy BW)" if decode else "TFLOP/s"))
    w("")
    w("| case | " + " | ".join("%s %s" % (t, b) if t == "spindle" else b for t, b in cols)
      + " | cuda_flash / best torch |")
    w("|---|" + "---:|" * (len(cols) + 1))
    for c in cases:
        if c.startswith(phase):
            cells = [metric(results[(c, b)], decode) for _, b in cols]
            best_torch = max(rate(results[(c, "torch_flash")], decode), rate(results[(c, "torch_cudnn")], decode))
            mine = rate(results[(c, "cuda_flash")], decode)
            ratio = "%.2fx" % (mine / best_torch) if mine > 0 and best_torch > 0 else "-"
            w("| %s | %s | %s |" % (c, " | ".join(cells), ratio))
    w("")
w("## Every row")
w("")
w("| case | backend | status | ms (min-max) | TFLOP/s | KV TB/s | % copy BW | max abs err | launches x repeats |")
w("|---|---|---|---:|---:|---:|---:|---:|---:|")
for c in cases:
    for _, b in columns:
        r = results.get((c, b))
        if r is None:
            continue
        status = r.get("status", "?") + (": " + cell_text(r["note"], 200) if r.get("note") else "")
        ms = "%.3f (%.3f-%.3f)" % (r["ms"], r["ms_min"], r["ms_max"]) if "ms" in r else "-"
        err = r.get("max_abs_err")
        err = "-" if err is None else (err if isinstance(err, str) else "%.2e" % err)
        f = lambda k, p: ("%.*f" % (p, r[k])) if k in r else "-"
        runs = "%d x %d" % (r["launches"], r["repeats"]) if "launches" in r else "-"
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (c, b, status, ms, f("tflops", 1), f("kv_tbps", 3),
                                                             f("pct_copy_bw", 1), err, runs))
gqa = [(c, b, r["gqa"]) for (c, b), r in results.items() if r.get("gqa")]
if gqa:
    w("")
    w("torch GQA handling:")
    w("")
    for c, b, g in gqa:
        w("- %s %s: %s" % (c, b, cell_text(g, 400)))
w("")
w("## Commands")
w("")
w("```")
for cmd in commands:
    w(cmd)
w("```")
w("")
w("Logs and per-process JSON: `%s/`." % os.path.basename(raw))
open(out, "w").write("\n".join(lines) + "\n")
print("run_cuda_bench: wrote %s" % out)
PYEOF
rc=$?
awk '$2 != 0 { bad++ } END { if (bad) printf "run_cuda_bench: %d process(es) exited non-zero (see %s)\n", bad, ARGV[1] }' \
  "$raw/exit_codes.txt"
exit $rc
