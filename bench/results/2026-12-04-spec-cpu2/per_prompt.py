#!/usr/bin/env python3
"""Per prompt of a prompts.json set: greedy completion text, and the speculative counters of that request alone."""
import argparse, http.client, json, sys
sys.path.insert(0, "bench/spec")
from spec_load import metrics
ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--set", default="repeating")
ap.add_argument("--max-tokens", type=int, default=128)
ap.add_argument("--show-text", action="store_true")
a = ap.parse_args()
c0 = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30); c0.request("GET", "/v1/models"); model = json.loads(c0.getresponse().read())["data"][0]["id"]
prompts = json.load(open("bench/spec/prompts.json"))[a.set]
for i, p in enumerate(prompts):
    before = metrics(a.port)
    c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps({"model": model, "prompt": p, "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True}), {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    after = metrics(a.port)
    d = {k: after[k] - before[k] for k in after}
    f = d["spec_total_num_forward_ct"]
    out = {"prompt": i, "tokens": r["usage"]["completion_tokens"], "decode_steps": d["decode_steps"],
           "verifies": f, "accept_len": round(d["spec_total_num_accepted_tokens"] / f, 3) if f else None,
           "drafted": d["spindle_spec_decode_num_draft_tokens_total"], "accepted": d["spindle_spec_decode_num_accepted_tokens_total"],
           "tok_per_step": round(r["usage"]["completion_tokens"] / d["decode_steps"], 3) if d["decode_steps"] else None}
    if a.show_text: out["text"] = r["choices"][0]["text"]
    print(json.dumps(out), flush=True)
