#!/usr/bin/env python3
"""The table of bench/e2e_gpu/run.sh from its result folder (markdown)."""
import glob
import json
import os
import sys

if len(sys.argv) != 2 or not os.path.isfile(os.path.join(sys.argv[1], "ceilings.json")):
    sys.exit("usage: summary.py RESULTS_DIR (a bench/e2e_gpu/run.sh result folder, with ceilings.json)")
d = sys.argv[1]
pct = lambda m, q: m.get(f"p{q}", m.get(str(q)))  # bench/loadgen.py: "p50"; older runs: "50"
load = lambda f: json.load(open(os.path.join(d, f))) if os.path.exists(os.path.join(d, f)) else None
ceil, model = load("ceilings.json"), load("model.json")
hf = {}
if os.path.exists(os.path.join(d, "hf.jsonl")):
    for line in open(os.path.join(d, "hf.jsonl")):
        if line.startswith("{"):
            j = json.loads(line)
            hf[j["batch"]] = j["output_tok_s"]
bw = ceil["copy_bandwidth_bytes_s"]
wb = model["weight_bytes"] if model else None
print(f"GPU {ceil['gpu']}: copy bandwidth {bw / 1e12:.2f} TB/s, bf16 GEMM {ceil['bf16_gemm_flop_s'] / 1e12:.0f} TFLOP/s")
if wb:
    bound = bw / wb
    print(f"weights {wb / 1e9:.2f} GB: batch-1 bound {bound:.1f} tok/s ({1e3 / bound:.2f} ms/token); "
          f"prefill bound {ceil['bf16_gemm_flop_s'] / (wb):.0f} tok/s (2 FLOP per weight per token)")
print()
print("Loads: 512-token prompts and 128 output tokens, except the `-short` rows (128-token prompts, 256 output tokens).")
print()
print("| run | C | output tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | decode step ms (forward=launch, device, sample, output, schedule+build) | vs peer |")
print("|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(d, "spindle-*.json"))) + sorted(glob.glob(os.path.join(d, "short-*.json"))):
    for r in json.load(open(f)):
        s = r["steps"].get("decode", {}).get("ms_per_step", {})
        note = ""
        if r["concurrency"] == 1 and wb:
            note = f"{r['output_tok_s'] / (bw / wb) * 100:.0f}% of bound"
        if r["concurrency"] in hf:
            note += f" {r['output_tok_s'] / hf[r['concurrency']]:.2f}x HF b{r['concurrency']}"
        print(f"| {r['label']} | {r['concurrency']} | {r['output_tok_s']:.1f} | {pct(r['ttft_ms'], 50):.0f} / {pct(r['ttft_ms'], 99):.0f} | "
              f"{pct(r['tpot_ms'], 50):.2f} / {pct(r['tpot_ms'], 99):.2f} | "
              f"{s.get('forward', 0):.2f}, {s.get('device', 0):.2f}, {s.get('sample', 0):.2f}, {s.get('output', 0):.2f}, "
              f"{s.get('schedule', 0) + s.get('build', 0):.2f} | {note} |")
for f in sorted(glob.glob(os.path.join(d, "prefill-*.json"))):
    for r in json.load(open(f)):
        rate = ceil["bf16_gemm_flop_s"] / wb if wb else float("nan")
        print(f"| {r['label']} | {r['concurrency']} | prompt {r['prompt_tok_s']:.0f} tok/s ({r['prompt_tok_s'] / rate * 100:.0f}% of GEMM bound) "
              f"| {pct(r['ttft_ms'], 50):.0f} / {pct(r['ttft_ms'], 99):.0f} | | | |")
for b, v in sorted(hf.items()):
    print(f"| HF transformers static cache | b{b} | {v:.1f} | | | | |")
for f in sorted(glob.glob(os.path.join(d, "metrics-*.txt"))):
    lines = [l.strip() for l in open(f) if l.startswith(("spindle_cuda_graph", "spindle_overlapped_steps"))]
    if lines:
        print(f"\n{os.path.basename(f)}: " + "; ".join(lines))
# cuDNN plans the served run built (one per new batch signature; cudnn_sdpa.cc logs each with its time).
for f in sorted(glob.glob(os.path.join(d, "serve-*.txt"))):
    ms = [float(l.split(" built in ")[1].split(" ms")[0]) for l in open(f, errors="replace") if "cudnn_sdpa: plan" in l and " built in " in l]
    if ms:
        print(f"\n{os.path.basename(f)}: {len(ms)} cuDNN plans built, {sum(ms):.0f} ms in all (largest {max(ms):.0f} ms)")
