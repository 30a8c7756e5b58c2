#!/usr/bin/env bash
# bench/spec/ab.sh: bench/spec/run.sh for two spindle binaries, alternating, one round each per
# turn (same prompts, same flags, same machine state), then one table of both: plain and
# speculating tok/s, TPOT and the speed-ups of each binary, medians over the turns.
#   BEFORE=path/to/spindle AFTER=path/to/spindle TURNS=3 bench/spec/ab.sh OUT
# Every other variable (PAIRS, LEVELS, MAX_TOKENS, SERVE_ARGS, PORT, ...) goes to run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: BEFORE=... AFTER=... bench/spec/ab.sh OUT}
turns=${TURNS:-3}
mkdir -p "$out"
for turn in $(seq 1 "$turns"); do
  for side in before after; do
    bin=$([[ $side == before ]] && echo "${BEFORE:?}" || echo "${AFTER:?}")
    SPINDLE=$bin ROUNDS=1 bench/spec/run.sh "$out/$side-t$turn" >"$out/$side-t$turn.log" 2>&1
    echo "turn $turn $side done ($(date -u +%T))"
  done
done
python3 - "$out" "$turns" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
out, turns = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, "bench/spec")
from spec_rows import flat  # noqa: E402
rows = {}
for side in ("before", "after"):
    for t in range(1, turns + 1):
        for line in open(f"{out}/{side}-t{t}/spec.jsonl"):
            if line.strip():
                r = flat(json.loads(line))
                rows.setdefault((side, r["label"], r["concurrency"]), []).append(r)
def med(side, label, c, key):
    v = [r[key] for r in rows.get((side, label, c), []) if r.get(key) is not None]
    return statistics.median(v) if v else None
def per_turn(side, plain, spec, c, key, invert):
    a, b = rows.get((side, plain, c), []), rows.get((side, spec, c), [])
    return sorted((x[key] / y[key]) if invert else (y[key] / x[key]) for x, y in zip(a, b) if x.get(key) and y.get(key))
print("| pair | C | binary | plain tok/s | spec tok/s | tok/s speed-up (median of turns; all) | plain TPOT ms | spec TPOT ms | TPOT ratio (median; all) | accept length |")
print("|---|---|---|---|---|---|---|---|---|---|")
for plain, spec in (("plain", "draft"), ("plain-repeating", "ngram")):
    for c in sorted({k[2] for k in rows}):
        for side in ("before", "after"):
            s = per_turn(side, plain, spec, c, "output_tok_s", False)
            tp = per_turn(side, plain, spec, c, "mean_tpot_ms", True)
            if not s: continue
            print(f"| {spec} vs {plain} | {c} | {side} | {med(side, plain, c, 'output_tok_s'):.1f} | {med(side, spec, c, 'output_tok_s'):.1f} | "
                  f"**{statistics.median(s):.2f}x**; {', '.join(f'{x:.2f}' for x in s)} | {med(side, plain, c, 'mean_tpot_ms'):.2f} | "
                  f"{med(side, spec, c, 'mean_tpot_ms'):.2f} | {statistics.median(tp):.2f}x; {', '.join(f'{x:.2f}' for x in tp)} | "
                  f"{med(side, spec, c, 'accept_length')} |")
for label in ("plain", "plain-repeating"):
    for c in sorted({k[2] for k in rows}):
        b, a = med("before", label, c, "output_tok_s"), med("after", label, c, "output_tok_s")
        if b and a:
            print(f"\n{label} C={c}: after / before tok/s {a / b:.2f}x (TPOT {med('before', label, c, 'mean_tpot_ms'):.2f} -> {med('after', label, c, 'mean_tpot_ms'):.2f} ms)")
PY
