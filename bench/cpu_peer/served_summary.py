#!/usr/bin/env python3
"""The table of bench/cpu_peer/served.sh: per file, concurrency and engine, the median over the
repetitions (and the range) of the aggregate output tok/s (all requests' output tokens over the
level's wall time, prefill included), the per-request decode tok/s (1000 / TPOT p50, TPOT taken
between a request's first and last token), TTFT p50 / p90 and the server's CPU seconds during the
level (served.log; on a loaded machine the one figure that other processes barely move, though a
polling thread pool's waits count in it); then Spindle / llama-server ratios, each taken inside one
repetition (both engines ran back to back) and summarised the same way.

usage: served_summary.py OUT_DIR   (reads OUT_DIR/rep*/FILE-ENGINE-cC.json; prints Markdown)
"""
import glob
import json
import os
import re
import statistics
import sys


def load(out):
    rows = {}  # (file, conc, engine) -> {rep: row}
    for path in glob.glob(os.path.join(out, "rep*", "*.json")):
        rep = int(re.search(r"rep(\d+)", path)[1])
        m = re.fullmatch(r"(.+)-(spindle|llama)-c(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        level = json.load(open(path))[0]
        if level["failed"]:
            sys.exit(f"served_summary.py: {path}: {level['failed']} failed requests: {level['errors'][:2]}")
        rows.setdefault((m[1], int(m[3]), m[2]), {})[rep] = {
            "output": level["output_tok_s"], "decode": 1000 / level["tpot_ms"]["p50"],
            "ttft": level["ttft_ms"]["p50"], "ttft90": level["ttft_ms"]["p90"]}
    if not rows:
        sys.exit(f"served_summary.py: no results under {out}/rep*/")
    log = os.path.join(out, "served.log")
    for m in re.finditer(r"rep (\d+) (\S+) (spindle|llama) C=(\d+) end; CPU seconds during it: spindle ([\d.]+), "
                         r"llama-server ([\d.]+)", open(log).read() if os.path.exists(log) else ""):
        row = rows.get((m[2], int(m[4]), m[3]), {}).get(int(m[1]))
        if row is not None:
            row["cpu"] = float(m[5] if m[3] == "spindle" else m[6])
    return rows


def cell(values, fmt="{:.2f}"):
    med = statistics.median(values)
    return fmt.format(med) + (f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(values) > 1 else "")


def main(out):
    rows = load(out)
    print("| file | C | engine | output tok/s (aggregate) | decode tok/s per request (1000/TPOT p50) "
          "| TTFT p50 ms | TTFT p90 ms | server CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in sorted(rows, key=lambda k: (k[0], k[1], k[2] != "spindle")):
        reps = rows[key].values()
        print(f"| {key[0]} | {key[1]} | {'Spindle' if key[2] == 'spindle' else 'llama-server'} | "
              f"{cell([r['output'] for r in reps])} | {cell([r['decode'] for r in reps])} | "
              f"{cell([r['ttft'] for r in reps], '{:.0f}')} | {cell([r['ttft90'] for r in reps], '{:.0f}')} | "
              f"{cell([r['cpu'] for r in reps], '{:.1f}') if all('cpu' in r for r in reps) else ''} |")
    print()
    print("| file | C | Spindle / llama-server output tok/s | decode tok/s per request | TTFT p50 (llama / Spindle) "
          "| CPU s (llama / Spindle) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for file, conc in sorted({(k[0], k[1]) for k in rows}):
        s, l = rows.get((file, conc, "spindle"), {}), rows.get((file, conc, "llama"), {})
        reps = sorted(set(s) & set(l))
        if not reps:
            continue
        ratio = lambda k, inv=False: cell([(l[r][k] / s[r][k]) if inv else (s[r][k] / l[r][k]) for r in reps], "{:.2f}x")
        cpu = ratio("cpu", True) if all("cpu" in s[r] and "cpu" in l[r] for r in reps) else ""
        print(f"| {file} | {conc} | {ratio('output')} | {ratio('decode')} | {ratio('ttft', True)} | {cpu} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
