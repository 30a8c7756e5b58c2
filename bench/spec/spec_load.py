#!/usr/bin/env python3
"""Drives a running OpenAI-compatible server with text prompts for the speculative-decoding bench.

C clients, each sending streaming /v1/completions requests (temperature 0 unless --temperature,
--max-tokens tokens, ignore_eos) over the prompt set until every prompt was sent --repeats times.
Prints one JSON line: output tokens/s over the run (total completion tokens / wall seconds), the
mean TPOT (per request: (last - first token) / (tokens - 1)), and, from /metrics before and after,
the run's speculative counters: verifies, accepted tokens (bonus included), accept length and rate,
and the decode steps with their mean wall milliseconds per part (schedule holds the proposal).
Standard library only (runs here and on the GPU host).
"""
import argparse
import http.client
import json
import re
import threading
import time


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for name in ("spec_total_num_accepted_tokens", "spec_total_num_forward_ct",
                 "spindle_spec_decode_num_draft_tokens_total", "spindle_spec_decode_num_accepted_tokens_total",
                 "spindle_spec_skipped_steps_total", "spindle_generation_tokens_total"):
        m = re.search(r"^" + name + r" (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    # Decode steps and where their wall time went (schedule includes the draft model's proposal).
    m = re.search(r'^spindle_steps_total\{phase="decode"\} (\S+)$', text, re.M)
    out["decode_steps"] = float(m.group(1)) if m else 0.0
    for part in ("schedule", "forward", "sample", "output"):
        m = re.search(r'^spindle_step_seconds_total\{phase="decode",part="' + part + r'"\} (\S+)$', text, re.M)
        out["decode_" + part + "_s"] = float(m.group(1)) if m else 0.0
    return out


def one_request(port, model, prompt, args):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": args.temperature,
                       "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True, "seed": 1})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = last = None
    tokens = 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        if chunk.get("choices") and chunk["choices"][0].get("text"):
            now = time.perf_counter()
            first = first or now
            last = now
    c.close()
    return start, first, last, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prompts", required=True, help="prompts.json")
    ap.add_argument("--set", required=True, help="which list of prompts.json")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    prompts = json.load(open(args.prompts))[args.set] * args.repeats
    c = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    one_request(args.port, model, prompts[0], args)  # warm-up
    before = metrics(args.port)
    results, lock, queue = [], threading.Lock(), list(prompts)

    def client():
        while True:
            with lock:
                if not queue:
                    return
                p = queue.pop()
            res = one_request(args.port, model, p, args)
            with lock:
                results.append(res)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    after = metrics(args.port)
    d = {k: after[k] - before[k] for k in after}
    tokens = sum(r[3] for r in results)
    tpots = [(r[2] - r[1]) / (r[3] - 1) for r in results if r[1] and r[3] > 1]
    out = {"label": args.label, "set": args.set, "concurrency": args.concurrency, "requests": len(results),
           "completion_tokens": tokens, "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 2),
           "mean_tpot_ms": round(1000 * sum(tpots) / len(tpots), 3) if tpots else None,
           "verifies": d["spec_total_num_forward_ct"], "accepted_tokens": d["spec_total_num_accepted_tokens"],
           "accept_length": round(d["spec_total_num_accepted_tokens"] / d["spec_total_num_forward_ct"], 3)
           if d["spec_total_num_forward_ct"] else None,
           "accept_rate": round(d["spindle_spec_decode_num_accepted_tokens_total"] /
                                d["spindle_spec_decode_num_draft_tokens_total"], 3)
           if d["spindle_spec_decode_num_draft_tokens_total"] else None,
           "skipped_steps": d["spindle_spec_skipped_steps_total"], "decode_steps": d["decode_steps"]}
    # Per decode step, milliseconds: schedule (with the draft proposal), forward, sample + output.
    for part in ("schedule", "forward", "sample", "output"):
        out["step_" + part + "_ms"] = (round(1000 * d["decode_" + part + "_s"] / d["decode_steps"], 4)
                                       if d["decode_steps"] else None)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
