#!/usr/bin/env bash
# Two spindle binaries served alternately (A B A B ...) on one GPU host with bench/e2e_gpu/run.sh's
# model and load, so that a before/after comparison sees the same machine state (issue 43's GPU
# check: batch 1 and C=32, medians within 2%).
#
#   A=.bundle/bin/spindle_before B=.bundle/bin/spindle ROUNDS=2 RESULTS=/tmp/ab bash bench/e2e_gpu/ab.sh
# Knobs: LEVELS (default 1,32), ROUNDS (2), SHAPE (run.sh's, 8b), PORT. Each run lands in
# $RESULTS/<label>-<round>/ (run.sh's files); the table at the end is the output tok/s per level
# and its median per binary.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
a=${A:?A=path of the first (before) binary}
b=${B:?B=path of the second (after) binary}
results=${RESULTS:-/tmp/e2e-ab}
rounds=${ROUNDS:-2}
levels=${LEVELS:-1,32}
mkdir -p "$results"

for round in $(seq 1 "$rounds"); do
  for label in A B; do
    bin=$a
    [[ $label == B ]] && bin=$b
    echo "== round $round $label: $bin ($("$bin" --version 2>&1 | head -1))"
    SPINDLE=$bin LEVELS=$levels SKIP_HF=1 SKIP_PREFILL=1 SKIP_SHORT=1 RESULTS="$results/$label-$round" \
      bash "$here/run.sh" >"$results/$label-$round.log" 2>&1
    tail -3 "$results/$label-$round.log"
  done
done

python3 - "$results" "$rounds" <<'EOF'
import json, os, statistics, sys
root, rounds = sys.argv[1], int(sys.argv[2])
table = {}  # (label, concurrency) -> [output tok/s per round]
for label in "AB":
    for r in range(1, rounds + 1):
        path = os.path.join(root, f"{label}-{r}", "spindle-graphs.json")
        if not os.path.exists(path):
            print(f"missing {path}")
            continue
        for row in json.load(open(path)):  # loadgen.py --json: one object per level
            table.setdefault((label, row["concurrency"]), []).append(row["output_tok_s"])
print("| binary | C | output tok/s per round | median |")
print("|---|---|---|---|")
for (label, c), values in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {label} | {c} | {', '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f} |")
for c in sorted({c for _, c in table}):
    if ("A", c) in table and ("B", c) in table:
        ratio = statistics.median(table[("B", c)]) / statistics.median(table[("A", c)])
        print(f"C={c}: B/A median ratio {ratio:.4f}")
EOF
