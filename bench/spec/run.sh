#!/usr/bin/env bash
# bench/spec: speculative decoding against plain decoding, same prompts, same run, the real
# server. For each pair (plain server, speculating server) and each concurrency (1 and 8), ROUNDS
# alternating rounds; bench/loadgen.py (text prompts of prompts.json) measures output tok/s, TPOT and the
# run's accept length/rate.
#   kjv:       kjv-tiny alone vs kjv-tiny + kjv-draft (--speculative-algorithm draft) on KJV verses
#   repeating: kjv-tiny alone vs kjv-tiny + n-gram (--speculative-algorithm ngram) on prompts whose
#              continuation repeats earlier context (a passage given twice, a list continued)
# Writes $OUT/spec.jsonl and $OUT/summary.md (medians over the rounds, speed-up = spec / plain).
#
#   bench/spec/run.sh [OUT]        SPINDLE=build/bin/spindle ROUNDS=3 MAX_TOKENS=128 SERVE_ARGS=...
#   PAIRS="kjv repeating"   which pairs run (default both)
#   LEVELS="1 8"            the concurrencies
#   DRAFT_VARIANTS="LABEL=FLAG,VALUE,... ..."  more draft servers in every round, after "draft",
#       each with those extra flags (commas become spaces), e.g.
#       DRAFT_VARIANTS="draft-v4096=--speculative-draft-vocab-size,4096" for a same-run A/B.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
spindle=${SPINDLE:-build/bin/spindle}
out=${1:-bench/results/spec-$(date -u +%F)}
port=${PORT:-8311}
rounds=${ROUNDS:-3}
max_tokens=${MAX_TOKENS:-128}
model=${MODEL:-models/kjv-tiny}
draft=${DRAFT:-models/kjv-draft}
levels=${LEVELS:-1 8}
pairs=${PAIRS:-kjv repeating}
variants=${DRAFT_VARIANTS:-}
mkdir -p "$out"
jsonl="$out/spec.jsonl"
: >"$jsonl"
{
  bench_header "bench/spec/run.sh $*; ROUNDS=$rounds MAX_TOKENS=$max_tokens SERVE_ARGS=${SERVE_ARGS:-} PAIRS=$pairs LEVELS=$levels DRAFT_VARIANTS=$variants"
} | tee "$out/spec.log"

run_server() {  # run_server LABEL FLAGS... ; runs every level once against it
  local label=$1 set=$2; shift 2
  # shellcheck disable=SC2086
  "$spindle" serve "$model" --port "$port" ${SERVE_ARGS:-} "$@" >"$out/serve-$label.log" 2>&1 &
  local pid=$!
  wait_healthy "$port" "$pid" 60 "$out/serve-$label.log" || { kill "$pid" 2>/dev/null; return 1; }
  for c in $levels; do
    python3 bench/loadgen.py --port "$port" --prompts bench/spec/prompts.json --set "$set" --levels "$c" \
      --repeats "$(( c > 1 ? 2 : 1 ))" --output-tokens "$max_tokens" --warmup --label "$label" --jsonl "$jsonl" \
      | tee -a "$out/spec.log"
  done
  curl -s "localhost:$port/metrics" >"$out/metrics-$label-r$round.txt"
  kill $pid; wait $pid 2>/dev/null || true
}

for round in $(seq 1 "$rounds"); do
  echo "== round $round" | tee -a "$out/spec.log"
  if [[ " $pairs " == *" kjv "* ]]; then
    run_server plain kjv
    run_server draft kjv --speculative-algorithm draft --speculative-draft-model-path "$draft"
    for v in $variants; do
      extra=${v#*=}
      # shellcheck disable=SC2086
      run_server "${v%%=*}" kjv --speculative-algorithm draft --speculative-draft-model-path "$draft" ${extra//,/ }
    done
  fi
  if [[ " $pairs " == *" repeating "* ]]; then
    run_server plain-repeating repeating
    run_server ngram repeating --speculative-algorithm ngram
  fi
done

python3 - "$jsonl" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
sys.path.insert(0, "bench/spec")
from spec_rows import flat  # noqa: E402
rows = [flat(json.loads(l)) for l in open(sys.argv[1]) if l.strip()]
# The k-th run of a label at a concurrency is round k (run.sh runs every server once per round).
seen = {}
for r in rows:
    key = (r["label"], r["concurrency"])
    r["round"] = seen[key] = seen.get(key, 0) + 1
def med(label, c, key):
    v = [r[key] for r in rows if r["label"] == label and r["concurrency"] == c and r.get(key) is not None]
    return statistics.median(v) if v else None
def fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)
def round_ratios(plain, spec, c, key, invert=False):  # spec / plain per round (plain / spec: invert)
    by = {(r["label"], r["round"]): r[key] for r in rows if r["concurrency"] == c and r.get(key)}
    out = []
    for (label, k), v in by.items():
        if label == spec and (plain, k) in by:
            out.append(by[(plain, k)] / v if invert else v / by[(plain, k)])
    return sorted(out)
print("| pair | C | plain tok/s | spec tok/s | speed-up | plain TPOT ms | spec TPOT ms | TPOT ratio per round (median; all) "
      "| accept length | accept rate | spec step ms: schedule (proposal) + forward |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
labels = sorted({r["label"] for r in rows})
draft_labels = ["draft"] + [l for l in labels if l.startswith("draft-")]
for plain, spec in [("plain", d) for d in draft_labels] + [("plain-repeating", "ngram")]:
    for c in sorted({r["concurrency"] for r in rows}):
        p, s = med(plain, c, "output_tok_s"), med(spec, c, "output_tok_s")
        if p is None or s is None: continue
        tr = round_ratios(plain, spec, c, "mean_tpot_ms", invert=True)
        print(f"| {spec} vs {plain} | {c} | {p:.1f} | {s:.1f} | {s/p:.2f}x | {fmt(med(plain, c, 'mean_tpot_ms'))} | "
              f"{fmt(med(spec, c, 'mean_tpot_ms'))} | {fmt(statistics.median(tr) if tr else None)}x; "
              f"{', '.join(f'{x:.2f}' for x in tr)} | {med(spec, c, 'accept_length')} | {med(spec, c, 'accept_rate')} | "
              f"{fmt(med(spec, c, 'step_schedule_ms'), '{:.3f}')} + {fmt(med(spec, c, 'step_forward_ms'), '{:.3f}')} "
              f"(plain {fmt(med(plain, c, 'step_schedule_ms'), '{:.3f}')} + {fmt(med(plain, c, 'step_forward_ms'), '{:.3f}')}) |")
PY
