#!/usr/bin/env python3
"""Summarizes bench/e2e_gpu/structured_rows.sh: per concurrency, the plain and json arms' output
tok/s in each round, the medians and their ratio (json / plain: 0.97 is a 3% cost), and the decode
step's parts (ms per step, median of the rounds) with what the constraint adds to each.

    python3 bench/e2e_gpu/structured_summary.py RESULTS/structured.jsonl
"""
import json
import statistics
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                arm = r["label"].split("-")[0]
                rows.setdefault(r["concurrency"], {}).setdefault(arm, []).append(r)
    return rows


def decode_parts(runs):
    """Median ms/step of each decode part over the runs, and the median decode step count."""
    parts = {}
    steps = []
    for r in runs:
        d = r.get("steps", {}).get("decode")
        if not d:
            continue
        steps.append(d["steps"])
        for k, v in d["ms_per_step"].items():
            parts.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in parts.items()}, (statistics.median(steps) if steps else None)


def main(path):
    rows = load(path)
    failed = sum(r["failed"] for level in rows.values() for runs in level.values() for r in runs)
    print(f"failed requests: {failed}")
    for conc in sorted(rows):
        plain, js = rows[conc].get("plain", []), rows[conc].get("json", [])
        if not plain or not js:
            continue
        rate = lambda runs: [r["output_tok_s"] for r in runs]
        mp, mj = statistics.median(rate(plain)), statistics.median(rate(js))
        print(f"\n## C={conc}\n")
        print("| arm | output tok/s by round | median |\n| --- | --- | --- |")
        print(f"| plain | {', '.join(f'{x:.1f}' for x in rate(plain))} | {mp:.1f} |")
        print(f"| json | {', '.join(f'{x:.1f}' for x in rate(js))} | {mj:.1f} |")
        print(f"\njson / plain of the medians: {mj / mp:.3f} ({100 * (1 - mj / mp):+.1f}% cost)\n")
        pp, ps = decode_parts(plain)
        jp, jsteps = decode_parts(js)
        print(f"decode steps (median): plain {ps}, json {jsteps}\n")
        print("| decode part | plain ms/step | json ms/step | added |\n| --- | --- | --- | --- |")
        for k in pp:
            if k in jp:
                print(f"| {k} | {pp[k]:.3f} | {jp[k]:.3f} | {jp[k] - pp[k]:+.3f} |")
        total_p, total_j = sum(pp.values()), sum(jp.values())
        print(f"| step | {total_p:.3f} | {total_j:.3f} | {total_j - total_p:+.3f} "
              f"({100 * (total_j - total_p) / total_p:+.1f}%) |")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
