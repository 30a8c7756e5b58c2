#!/usr/bin/env python3
"""bench/serving/loadgen.mjs for machines without Node (the GPU host has only python3): the same
closed loop (C clients, each sends a streaming /v1/completions request, waits for its last token,
sends the next, until N requests are done), the same prompts (mulberry32 with the same seed, so
both scripts send identical token ids), the same measures (TTFT; TPOT = (end - first token) /
(tokens - 1) per request; output tok/s over the wall time) and the same --json summary keys that
bench/cpu_peer/summarize.py reads. Shared prefixes, the prefix-cache and step-breakdown readouts
of the Node script are left out.

  python3 bench/serving/loadgen.py --url http://127.0.0.1:8080 --model kjv-tiny \
    --requests 64 --concurrency 16 --prompt-tokens 128 --output-tokens 64 --vocab 4096 [--json FILE]
"""
import argparse
import http.client
import json
import math
import threading
import time
import urllib.parse


def mulberry32(seed):
    state = [seed & 0xFFFFFFFF]

    def imul(a, b):
        return (a * b) & 0xFFFFFFFF

    def nxt():
        state[0] = (state[0] + 0x6D2B79F5) & 0xFFFFFFFF
        s = state[0]
        t = imul(s ^ (s >> 15), 1 | s)
        t = ((t + imul(t ^ (t >> 7), 61 | t)) & 0xFFFFFFFF) ^ t
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    return nxt


def percentile(values, p):
    if not values:
        return math.nan
    i = min(len(values) - 1, max(0, math.ceil(p / 100 * len(values)) - 1))
    return values[i]


def one_request(args, prompt):
    url = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=600)
    body = json.dumps({"model": args.model, "prompt": prompt, "max_tokens": args.output_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:500]!r}")
    first = 0.0
    tokens = 0
    # Server-sent events: "data: {...}" lines, events separated by blank lines.
    while True:
        line = res.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            continue
        msg = json.loads(data)
        if msg.get("usage"):
            tokens = msg["usage"]["completion_tokens"]
        choices = msg.get("choices") or []
        if not first and choices and "text" in choices[0]:
            first = time.perf_counter()
    end = time.perf_counter()
    conn.close()
    if tokens != args.output_tokens:
        raise RuntimeError(f"got {tokens} tokens, asked {args.output_tokens}")
    return {"ttft": first - start, "e2e": end - start, "tpot": (end - first) / max(1, tokens - 1), "tokens": tokens}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model", default="kjv-tiny")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default="")
    args = p.parse_args()

    random = mulberry32(args.seed)
    prompts = [[math.floor(random() * args.vocab) for _ in range(args.prompt_tokens)] for _ in range(args.requests)]
    results = []
    lock = threading.Lock()
    nxt = [0]
    errors = []

    def client():
        while True:
            with lock:
                if nxt[0] >= len(prompts) or errors:
                    return
                prompt = prompts[nxt[0]]
                nxt[0] += 1
            try:
                r = one_request(args, prompt)
            except Exception as e:  # reported after the other clients stop
                errors.append(e)
                return
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]

    ttft = sorted(r["ttft"] for r in results)
    tpot = sorted(r["tpot"] for r in results)
    out_tokens = sum(r["tokens"] for r in results)
    summary = {
        "requests": len(results), "concurrency": args.concurrency, "prompt_tokens": args.prompt_tokens,
        "prefix_tokens": 0, "groups": 0, "cache": None, "output_tokens": args.output_tokens, "wall_s": wall,
        "output_tok_s": out_tokens / wall,
        "ttft_ms": {k: 1e3 * percentile(ttft, q) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))},
        "tpot_ms": {k: 1e3 * percentile(tpot, q) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))},
        "steps": None, "client": "loadgen.py",
    }
    t, s = summary["ttft_ms"], summary["tpot_ms"]
    print(f"C={args.concurrency} N={len(results)} prompt {args.prompt_tokens} output {args.output_tokens}: "
          f"{summary['output_tok_s']:.2f} output tok/s in {wall:.2f} s; TTFT p50/p90/p99 "
          f"{t['p50']:.2f}/{t['p90']:.2f}/{t['p99']:.2f} ms; TPOT p50/p90/p99 {s['p50']:.2f}/{s['p90']:.2f}/{s['p99']:.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
