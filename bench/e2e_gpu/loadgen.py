#!/usr/bin/env python3
"""Streaming completions against an OpenAI-compatible server, at fixed concurrency levels: every
request gets a fresh random token-id prompt (no prefix-cache hits), max_tokens output tokens with
ignore_eos. Per level: output tok/s over the level's wall time, TTFT and TPOT percentiles (TPOT of
a request = (last token - first token) / (tokens - 1)), and, from the server's
spindle_step_seconds_total / spindle_steps_total, the per-step breakdown (host schedule and build,
launch, device wait, sample, output) over the level. Standard library only.

usage: loadgen.py --port P --levels 1,8,32 --prompt-tokens 512 --output-tokens 128 --vocab V [--json F]
"""
import argparse
import http.client
import json
import random
import re
import statistics
import threading
import time


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    parts = {}
    for m in re.finditer(r'^spindle_step_seconds_total\{phase="(\w+)",part="(\w+)"\} (\S+)$', text, re.M):
        parts[(m.group(1), m.group(2))] = float(m.group(3))
    steps = {m.group(1): float(m.group(2)) for m in re.finditer(r'^spindle_steps_total\{phase="(\w+)"\} (\S+)$', text, re.M)}
    return parts, steps


MODEL = None


def served_model(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


def one_request(port, prompt, output_tokens, result):
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": output_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            line = event.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if j.get("choices") and j["choices"][0].get("text"):
                times.append(time.perf_counter())
    result.update(t0=t0, times=times, status=r.status)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    f = int(k)
    return xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)


def run_level(port, conc, n_requests, prompt_tokens, output_tokens, vocab, rng):
    prompts = [[rng.randrange(0, vocab - 1) for _ in range(prompt_tokens)] for _ in range(n_requests)]
    results = [dict() for _ in range(n_requests)]
    before = metrics(port)
    next_i = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n_requests:
                return
            one_request(port, prompts[i], output_tokens, results[i])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = metrics(port)
    ttft, tpot, tokens = [], [], 0
    for r in results:
        ts = r.get("times", [])
        tokens += len(ts)
        if ts:
            ttft.append(ts[0] - r["t0"])
        if len(ts) > 1:
            tpot.append((ts[-1] - ts[0]) / (len(ts) - 1))
    breakdown = {}
    for phase in ("decode", "prefill"):
        steps = after[1].get(phase, 0) - before[1].get(phase, 0)
        if steps <= 0:
            continue
        parts = {part: (after[0].get((phase, part), 0) - before[0].get((phase, part), 0)) / steps * 1e3
                 for part in ("schedule", "build", "forward", "device", "sample", "output")}
        breakdown[phase] = {"steps": steps, "ms_per_step": parts}
    return {"concurrency": conc, "requests": n_requests, "prompt_tokens": prompt_tokens, "output_tokens_each": output_tokens, "ok": sum(1 for r in results if r.get("status") == 200),
            "output_tokens": tokens, "wall_s": wall, "output_tok_s": tokens / wall,
            "prompt_tok_s": n_requests * prompt_tokens / wall,
            "ttft_ms": {p: pct(ttft, p) * 1e3 for p in (50, 90, 99)},
            "tpot_ms": {p: pct(tpot, p) * 1e3 for p in (50, 90, 99)}, "steps": breakdown}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--levels", default="1,8,32,64,128")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--requests-per-level", type=float, default=2.0, help="requests = max(4, this x concurrency)")
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    ap.add_argument("--no-warmup", action="store_true")
    args = ap.parse_args()
    global MODEL
    MODEL = served_model(args.port)
    rng = random.Random(1)
    # Warm-up: one request per level's concurrency (first-use costs: graph captures, cuDNN plans).
    if not args.no_warmup:
        for conc in [int(x) for x in args.levels.split(",")]:
            run_level(args.port, conc, conc, min(args.prompt_tokens, 64), 16, args.vocab, rng)
    rows = []
    for conc in [int(x) for x in args.levels.split(",")]:
        n = max(4, int(args.requests_per_level * conc))
        row = run_level(args.port, conc, n, args.prompt_tokens, args.output_tokens, args.vocab, rng)
        row["label"] = args.label
        rows.append(row)
        d = row["steps"].get("decode", {}).get("ms_per_step", {})
        print(f"{args.label} C={conc:<4} ok {row['ok']}/{n}  {row['output_tok_s']:8.1f} tok/s  "
              f"prompt {row['prompt_tok_s']:8.0f} tok/s  "
              f"TTFT p50 {row['ttft_ms'][50]:7.1f} p99 {row['ttft_ms'][99]:7.1f} ms  "
              f"TPOT p50 {row['tpot_ms'][50]:6.2f} p99 {row['tpot_ms'][99]:6.2f} ms  decode step ms: "
              + " ".join(f"{k} {v:.3f}" for k, v in d.items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
