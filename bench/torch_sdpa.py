#!/usr/bin/env python3
"""The peer of bench_attention_cuda: torch.nn.functional.scaled_dot_product_attention on the same
shapes, restricted to one SDPA backend at a time (FLASH_ATTENTION, then CUDNN_ATTENTION).

Shapes (as bench/attention_cuda.cc): bf16, 32 query heads over 8 KV heads, head_dim 128,
scale 1/sqrt(128); contiguous [B, H, S, D] tensors (no paging: torch's SDPA has none).
  prefill: is_causal=True, no cached prefix: batch 8 x 2048, batch 2 x 8192;
           FLOPs = 4 * head_dim * num_heads * sum over sequences of S * (S + 1) / 2
  decode:  q of length 1, is_causal=False, K/V of kv_len = cached + 1 (4097, 32769):
           batch 64 x 4096 cached, batch 8 x 32768 cached;
           KV bytes = 2 * batch * kv_len * num_kv_heads * head_dim * 2 (the 8-head bytes, also when
           K/V had to be repeated to 32 heads for a backend that rejects enable_gqa)
GQA: enable_gqa=True when the backend accepts it; otherwise K/V are repeat_interleave'd to 32
heads before timing, and the row says so.
Copy bandwidth: dst.copy_(src) of a 2 GiB buffer, counted as bytes read + written.
Timing: 3 warm-up calls, then `repeats` (5) batches of N back-to-back calls timed with CUDA
events, N so that a batch takes >= --min-ms (200 ms); the median batch's per-call time.
Correctness: a few random (batch, head, row) outputs vs float64 over the same data.

usage: python3 bench/torch_sdpa.py [--only prefill|decode] [--case NAME]... [--backend NAME]...
                                   [--device N] [--json FILE] [--min-ms MS] [--repeats R]
"""
import argparse
import json
import math
import sys
import traceback
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 8, 128
SCALE = 1.0 / math.sqrt(HEAD_DIM)
TOLERANCE = 1.5e-2  # Spindle's bf16 tolerance (attn/validation.cc); q is bf16 here, so a bit looser in spirit

# name, decode, batch, new tokens, cached tokens
CASES = [
    ("prefill_b8_s2048", False, 8, 2048, 0),
    ("prefill_b2_s8192", False, 2, 8192, 0),
    ("decode_b64_kv4096", True, 64, 1, 4096),
    ("decode_b8_kv32768", True, 8, 1, 32768),
]
BACKENDS = {"torch_flash": SDPBackend.FLASH_ATTENTION, "torch_cudnn": SDPBackend.CUDNN_ATTENTION}


def time_batch(fn, n):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3


def time_calls(fn, min_ms, repeats):
    """Per-call seconds: median, min, max over `repeats` batches; calls per batch."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    estimate = max(time_batch(fn, 3) / 3, 1e-7)
    n = int(min(max(math.ceil(min_ms * 1e-3 / estimate), 1), 100000))
    per_call = sorted(time_batch(fn, n) / n for _ in range(repeats))
    return {"median_s": per_call[len(per_call) // 2], "min_s": per_call[0], "max_s": per_call[-1],
            "launches": n, "repeats": repeats}


def measure_copy(min_ms, repeats):
    nbytes = 2 << 30
    src = torch.rand(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    t = time_calls(lambda: dst.copy_(src), min_ms, repeats)
    del src, dst
    torch.cuda.empty_cache()
    return {"buffer_bytes": nbytes, "copy_tbps": 2.0 * nbytes / t["median_s"] / 1e12}


def make_inputs(case, gen):
    _, decode, batch, new, cached = case
    kv_len = cached + new
    def uniform(*shape):
        return (torch.rand(*shape, generator=gen, device="cuda", dtype=torch.float32) * 2 - 1).to(torch.bfloat16)
    q = uniform(batch, NUM_HEADS, new, HEAD_DIM)
    k = uniform(batch, NUM_KV_HEADS, kv_len, HEAD_DIM)
    v = uniform(batch, NUM_KV_HEADS, kv_len, HEAD_DIM)
    return q, k, v


def reference_error(case, q, k, v, out, gen_seed, samples=8):
    """Max abs error of `out` at random (batch, head, row) vs float64 (causal for prefill)."""
    _, decode, batch, new, cached = case
    g = torch.Generator().manual_seed(gen_seed)
    group = NUM_HEADS // NUM_KV_HEADS
    worst = 0.0
    for i in range(samples):
        b = int(torch.randint(batch, (1,), generator=g))
        h = int(torch.randint(NUM_HEADS, (1,), generator=g))
        row = new - 1 if i == 0 else int(torch.randint(new, (1,), generator=g))
        n = cached + row + 1  # causal; equals kv_len for decode
        qv = q[b, h, row].double()
        kk = k[b, h // group, :n].double()
        vv = v[b, h // group, :n].double()
        p = torch.softmax((kk @ qv) * SCALE, dim=0)
        want = p @ vv
        got = out[b, h, row].double()
        if not torch.isfinite(got).all():
            return math.inf
        worst = max(worst, float((got - want).abs().max()))
    return worst


def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def why(e, caught):
    """The error's first line plus torch's warnings, which say why each backend was rejected."""
    reasons = [str(w.message).strip().replace("\n", " ") for w in caught]
    return "; ".join([first_line(e)] + reasons)


def run_case_backend(case, backend_name, copy_tbps, args):
    name, decode, batch, new, cached = case
    kv_len = cached + new
    row = {"case": name, "backend": backend_name, "phase": "decode" if decode else "prefill", "batch": batch,
           "new_tokens": new, "cached_tokens": cached, "kv_len": kv_len, "status": "ok", "note": ""}
    causal = not decode
    caught = []
    try:
        with warnings.catch_warnings(record=True) as caught, sdpa_kernel([BACKENDS[backend_name]]):
            warnings.simplefilter("always")
            gen = torch.Generator(device="cuda").manual_seed(1)
            q, k, v = make_inputs(case, gen)

            def call(kk, vv, gqa):
                extra = {"enable_gqa": True} if gqa else {}
                return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=SCALE, **extra)

            kk, vv, gqa = k, v, True
            try:
                out = call(kk, vv, True)
                torch.cuda.synchronize()
                row["gqa"] = "enable_gqa=True"
            except RuntimeError as e:
                rejected = why(e, caught)
                caught.clear()
                group = NUM_HEADS // NUM_KV_HEADS
                kk = k.repeat_interleave(group, dim=1).contiguous()
                vv = v.repeat_interleave(group, dim=1).contiguous()
                gqa = False
                out = call(kk, vv, False)
                torch.cuda.synchronize()
                row["gqa"] = "K/V repeat_interleave'd to 32 heads before timing (enable_gqa rejected: %s)" % rejected
                row["note"] = "K/V repeated to 32 heads before timing; TB/s counts the 8-head bytes"
            err = reference_error(case, q, k, v, out, gen_seed=1234)
            row["max_abs_err"] = err if math.isfinite(err) else "non-finite"
            if not err <= TOLERANCE:
                row["status"] = "WRONG"
            del out
            t = time_calls(lambda: call(kk, vv, gqa), args.min_ms, args.repeats)
    except Exception as e:  # noqa: BLE001 -- one failing row must not stop the others
        row["status"] = "error"
        row["note"] = why(e, caught)
        traceback.print_exc(file=sys.stderr)
        return row
    row.update({"ms": t["median_s"] * 1e3, "ms_min": t["min_s"] * 1e3, "ms_max": t["max_s"] * 1e3,
                "launches": t["launches"], "repeats": t["repeats"]})
    if decode:
        kv_bytes = 2.0 * batch * kv_len * NUM_KV_HEADS * HEAD_DIM * 2
        row["kv_tbps"] = kv_bytes / t["median_s"] / 1e12
        if copy_tbps > 0:
            row["pct_copy_bw"] = 100 * row["kv_tbps"] / copy_tbps
    else:
        flops = 4.0 * HEAD_DIM * NUM_HEADS * batch * (new * (new + 1) / 2)
        row["tflops"] = flops / t["median_s"] / 1e12
    return row


def fmt(x, prec):
    return "-" if x is None or x <= 0 else "%.*f" % (prec, x)


def print_table(rows):
    print("\n| case | backend | status | ms | TFLOP/s | KV TB/s | % of copy BW | max abs err | launches x repeats |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        status = r["status"] + (": " + r["note"] if r.get("note") else "")
        status = status.replace("|", " ").replace("\n", " ")
        err = r.get("max_abs_err")
        err_s = "-" if err is None else (err if isinstance(err, str) else "%.2e" % err)
        runs = "%d x %d" % (r["launches"], r["repeats"]) if "launches" in r else "-"
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["case"], r["backend"], status, fmt(r.get("ms"), 3), fmt(r.get("tflops"), 1), fmt(r.get("kv_tbps"), 3),
            fmt(r.get("pct_copy_bw"), 1), err_s, runs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["prefill", "decode"])
    ap.add_argument("--case", action="append", choices=[c[0] for c in CASES])
    ap.add_argument("--backend", action="append", choices=list(BACKENDS))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--min-ms", type=float, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    torch.cuda.set_device(args.device)
    props = torch.cuda.get_device_properties(args.device)
    cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print("device %d: %s, compute capability %d.%d, %d SMs; torch %s, CUDA %s, cuDNN %s" % (
        args.device, props.name, props.major, props.minor, props.multi_processor_count, torch.__version__,
        torch.version.cuda, cudnn_version))
    print("shape: %d query heads over %d KV heads, head_dim %d, bf16 q/K/V/out, contiguous [B, H, S, D], scale 1/sqrt(%d)"
          % (NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, HEAD_DIM))
    print("timing: 3 warm-up calls, median of %d batches of >= %.0f ms of back-to-back calls (CUDA events)"
          % (args.repeats, args.min_ms))

    try:
        copy = measure_copy(args.min_ms, args.repeats)
        print("copy bandwidth (%d MiB tensor copy_, read + write): %.3f TB/s" % (copy["buffer_bytes"] >> 20,
                                                                                copy["copy_tbps"]))
    except Exception as e:  # noqa: BLE001
        copy = {"buffer_bytes": 0, "copy_tbps": 0.0, "error": str(e)}
        print("copy bandwidth: failed (%s)" % e)

    rows = []
    for case in CASES:
        name, decode = case[0], case[1]
        if args.only and args.only != ("decode" if decode else "prefill"):
            continue
        if args.case and name not in args.case:
            continue
        for backend in BACKENDS:
            if args.backend and backend not in args.backend:
                continue
            r = run_case_backend(case, backend, copy["copy_tbps"], args)
            torch.cuda.empty_cache()
            rows.append(r)
            print("  %-18s %-14s %s%s%s" % (name, backend, r["status"], ": " if r["note"] else "", r["note"]))
            if r.get("gqa"):
                print("  %-18s %-14s gqa: %s" % (name, backend, r["gqa"]))
    print_table(rows)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tool": "torch_sdpa", "device": {"index": args.device, "name": props.name,
                       "cc": "%d.%d" % (props.major, props.minor), "num_sms": props.multi_processor_count},
                       "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn_version,
                       "copy": copy, "shape": {"num_heads": NUM_HEADS, "num_kv_heads": NUM_KV_HEADS,
                                               "head_dim": HEAD_DIM, "dtype": "bf16", "scale": SCALE},
                       "timing": {"warmup": 3, "min_ms_per_batch": args.min_ms, "repeats": args.repeats,
                                  "statistic": "median"},
                       "tolerance": TOLERANCE, "rows": rows}, f, indent=2)
            f.write("\n")
    return 3 if any(r["status"] not in ("ok",) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
