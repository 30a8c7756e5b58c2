#!/usr/bin/env python3
"""Summarises an ncu run over bench_spec_verify (one prefill, then alternating decode and verify
forwards) into the kernels of one decode forward: count and device time per kernel, grouped, and
the sum against the measured step. Each forward begins with the embedding gather, which splits
the run into forwards: #0 the prefill, then decode, verify, decode, ... (the bench's order).

usage: kernel_profile.py NCU_CSV [--bytes-per-step B] [--prefill]
  NCU_CSV: the stdout of `ncu --csv --page raw --metrics gpu__time_duration.sum ...`
"""
import argparse
import csv
import io
import statistics
import sys
from collections import OrderedDict


def read_kernels(path):
    lines = [l for l in open(path, encoding="utf-8", errors="replace") if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("".join(lines))))
    header = rows[0]
    name_col = header.index("Kernel Name")
    time_col = header.index("gpu__time_duration.sum")
    kernels = []
    for r in rows[1:]:
        try:
            kernels.append((r[name_col], float(r[time_col].replace(",", ""))))  # ns (--print-units base)
        except (ValueError, IndexError):
            continue  # the units row
    return kernels


def short(name):
    for prefix in ("void ", "spindle::kernels::cuda::", "spindle::", "(anonymous namespace)::", "<unnamed>::"):
        name = name.replace(prefix, "")
    return name.split("(")[0][:90]


def median_forward(forwards):
    """The forward of median total device time, and that total (ns)."""
    totals = [sum(ns for _, ns in f) for f in forwards]
    pick = forwards[totals.index(sorted(totals)[len(totals) // 2])]
    return pick, sum(ns for _, ns in pick)


def by_kernel(forward):
    """Kernel name (shortened) -> [count, ns] in order of first launch."""
    groups = OrderedDict()
    for name, ns in forward:
        g = groups.setdefault(short(name), [0, 0.0])
        g[0] += 1
        g[1] += ns
    return groups


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--bytes-per-step", type=float, default=0.0)
    p.add_argument("--prefill", action="store_true", help="summarise forward #0 (the prefill) instead")
    a = p.parse_args()
    kernels = read_kernels(a.csv)
    forwards, current = [], None
    for name, ns in kernels:
        if "embedding" in name:
            current = []
            forwards.append(current)
        if current is not None:
            current.append((name, ns))
    if a.prefill and forwards:
        f = forwards[0]
        total = sum(ns for _, ns in f)
        print(f"# The prefill forward: {len(f)} kernels, {total / 1e3:.1f} us of device time")
        print()
        print("| kernel | count | total us | share | mean us |")
        print("|---|---|---|---|---|")
        for name, (n, ns) in sorted(by_kernel(f).items(), key=lambda kv: -kv[1][1]):
            print(f"| {name} | {n} | {ns / 1e3:.1f} | {100 * ns / total:.1f}% | {ns / n / 1e3:.2f} |")
        return
    if len(forwards) < 2:
        sys.exit(f"kernel_profile: {len(forwards)} forwards found in {len(kernels)} kernels")
    decodes = forwards[1::2]
    totals = [sum(ns for _, ns in f) for f in decodes]
    pick, total = median_forward(decodes)
    groups = by_kernel(pick)
    print(f"# One decode forward (median of {len(decodes)}): {len(pick)} kernels, {total / 1e3:.1f} us of device time")
    if a.bytes_per_step:
        print(f"# bytes read at least: {a.bytes_per_step / 1e9:.3f} GB")
    print()
    print("| kernel | count | total us | share | mean us |")
    print("|---|---|---|---|---|")
    for name, (n, ns) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {n} | {ns / 1e3:.1f} | {100 * ns / total:.1f}% | {ns / n / 1e3:.2f} |")
    print()
    print("## Sequence of the first 40 kernels")
    for (name, ns) in pick[:40]:
        print(f"- {short(name)}: {ns / 1e3:.2f} us")
    print()
    print("## Decode forwards (us):", ", ".join(f"{t / 1e3:.0f}" for t in totals))
    verifies = forwards[2::2]
    if verifies:
        print("## Verify forwards (us):", ", ".join(f"{sum(ns for _, ns in f) / 1e3:.0f}" for f in verifies))
        vpick, vtotal = median_forward(verifies)
        vgroups = by_kernel(vpick)
        print()
        print(f"## Median decode forward against the median verify forward: {total / 1e3:.1f} vs {vtotal / 1e3:.1f} us")
        print()
        print("| kernel | decode count | decode us | verify count | verify us | verify - decode us |")
        print("|---|---|---|---|---|---|")
        names = list(dict.fromkeys(list(groups) + list(vgroups)))
        rows = [(n, groups.get(n, [0, 0.0]), vgroups.get(n, [0, 0.0])) for n in names]
        for n, (dc, dns), (vc, vns) in sorted(rows, key=lambda r: -(r[2][1] - r[1][1])):
            print(f"| {n} | {dc} | {dns / 1e3:.1f} | {vc} | {vns / 1e3:.1f} | {(vns - dns) / 1e3:+.1f} |")


if __name__ == "__main__":
    main()
