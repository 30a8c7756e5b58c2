#!/usr/bin/env python3
"""The table of bench/e2e_gpu/fp8_rows.sh (markdown), and the decode-step bytes of a folder.

  fp8_summary.py RESULTS_DIR            the table: each row's batch-1 tok/s against its decode bound
                                        (copy bandwidth / step bytes) and every row against bf16
  fp8_summary.py --bytes DIR ROW        JSON {row, step_bytes}: the bytes one decode step reads from the
                                        folder's model.safetensors header: every tensor but the
                                        embedding (counted once as the LM head when tied); for ROW
                                        `quantize` (--quantization fp8, per-channel at load) each
                                        projection counts 1 byte per weight plus 4 per output row.
"""
import glob
import json
import os
import struct
import sys

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ELEMENT_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "F8_E5M2": 1}


def step_bytes(folder, row):
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    config = json.load(open(os.path.join(folder, "config.json")))
    total = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if name == "model.embed_tokens.weight" and not config.get("tie_word_embeddings"):
            continue
        count = 1
        for d in t["shape"]:
            count *= d
        if row == "quantize" and name.rsplit(".", 2)[-2] in PROJECTIONS:
            total += count + 4 * t["shape"][0]
        else:
            total += count * ELEMENT_BYTES[t["dtype"]]
    return total


def load(d, name):
    path = os.path.join(d, name)
    return json.load(open(path)) if os.path.exists(path) else None


def table(d):
    ceil = load(d, "ceilings.json")
    bw = ceil["copy_bandwidth_bytes_s"]
    print(f"GPU {ceil['gpu']}: copy bandwidth {bw / 1e12:.2f} TB/s, bf16 GEMM {ceil['bf16_gemm_flop_s'] / 1e12:.0f} "
          f"TFLOP/s, FP8 GEMM (torch._scaled_mm) {ceil.get('fp8_gemm_flop_s', 0) / 1e12:.0f} TFLOP/s")
    print()
    print("| row | step GB | bound tok/s | C=1 tok/s | % of bound | C=1 / bf16 | C=32 tok/s | C=32 / bf16 | "
          "8k prefill TTFT ms | prefill bf16 / row |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = {}
    for f in sorted(glob.glob(os.path.join(d, "bytes-*.json"))):
        b = json.load(open(f))
        row = b["row"]
        decode = {r["concurrency"]: r["output_tok_s"] for r in (load(d, f"decode-{row}.json") or [])}
        prefill = load(d, f"prefill-{row}.json") or []
        ttft = prefill[0]["ttft_ms"]["p50"] if prefill else None
        rows[row] = (b["step_bytes"], decode, ttft)
    base = rows.get("bf16")
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
    for row, (nbytes, decode, ttft) in rows.items():
        bound = bw / nbytes
        c1, c32 = decode.get(1), decode.get(32)
        print(f"| {row} | {nbytes / 1e9:.2f} | {bound:.1f} | {c1 or 0:.1f} | {(c1 or 0) / bound * 100:.0f}% | "
              f"{ratio(c1, base and base[1].get(1))} | {c32 or 0:.1f} | {ratio(c32, base and base[1].get(32))} | "
              f"{ttft or 0:.0f} | {ratio(base and base[2], ttft)} |")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--bytes":
        print(json.dumps({"row": sys.argv[3], "step_bytes": step_bytes(sys.argv[2], sys.argv[3])}))
    elif len(sys.argv) == 2 and os.path.isfile(os.path.join(sys.argv[1], "ceilings.json")):
        table(sys.argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
