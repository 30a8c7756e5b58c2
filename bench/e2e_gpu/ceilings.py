#!/usr/bin/env python3
"""The GPU's two ceilings, measured now: device-to-device copy bandwidth (bytes read + written,
4 GiB buffers, median of 20 with CUDA events) and the bf16 GEMM rate (8192^3 on random data,
median of 20); with FP8=1 in the environment also torch's FP8 GEMM rate (torch._scaled_mm, e4m3,
per-tensor scales, bf16 output, 8192^3). Prints JSON."""
import json
import os

import torch


def median_ms(fn, n=20):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


src = torch.randn(1 << 30, device="cuda")  # 4 GiB f32
dst = torch.empty_like(src)
copy_ms = median_ms(lambda: dst.copy_(src))
bandwidth = 2 * src.numel() * 4 / (copy_ms / 1e3)
del src, dst
n = 8192
x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
gemm_ms = median_ms(lambda: x @ y)
result = {"copy_bandwidth_bytes_s": bandwidth, "bf16_gemm_flop_s": 2 * n ** 3 / (gemm_ms / 1e3),
          "gpu": torch.cuda.get_device_name(0)}
if os.environ.get("FP8") == "1":
    a = x.to(torch.float8_e4m3fn)
    b = y.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major, as _scaled_mm takes its second operand
    one = torch.ones((), device="cuda")
    fp8_ms = median_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    result["fp8_gemm_flop_s"] = 2 * n ** 3 / (fp8_ms / 1e3)
print(json.dumps(result))
