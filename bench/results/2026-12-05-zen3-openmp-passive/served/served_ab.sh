#!/usr/bin/env bash
# served A/B: $1 = label, $2 = binary; small-hd64 and small-hd32, C=1 and C=4, 256-token prompts
set -u
label=$1; bin=$2; out=/tmp/served-ab; mkdir -p $out
for m in small-hd32 small-hd64; do
  $bin serve /work/peer/models/$m --port 8411 > $out/$label-$m-serve.txt 2>&1 &
  pid=$!
  for i in $(seq 1 100); do curl -sf localhost:8411/health >/dev/null && break; sleep 0.2; done
  for c in 1 4; do
    node bench/serving/loadgen.mjs --url http://127.0.0.1:8411 --model $m --requests 32 --concurrency $c --prompt-tokens 256 --output-tokens 32 --vocab 8000 --json $out/$label-$m-c$c.json > $out/$label-$m-c$c.txt 2>&1
    printf "%s %s C=%s: " $label $m $c; grep -E "output tok/s|TTFT|TPOT" $out/$label-$m-c$c.txt | tr '\n' ' '; echo
  done
  kill $pid; wait $pid 2>/dev/null
done
