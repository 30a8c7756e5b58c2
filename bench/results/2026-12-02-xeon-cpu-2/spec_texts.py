#!/usr/bin/env python3
"""Greedy texts of every prompt of a bench/spec prompt set from a running server (one at a time,
temperature 0, ignore_eos): prints one JSON line {label, texts}. Standard library only."""
import http.client, json, sys
port, label, prompt_set, max_tokens = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
prompts = json.load(open("bench/spec/prompts.json"))[prompt_set]
c = http.client.HTTPConnection("localhost", port, timeout=120)
c.request("GET", "/v1/models"); model = json.loads(c.getresponse().read())["data"][0]["id"]
texts = []
for p in prompts:
    body = json.dumps({"model": model, "prompt": p, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    texts.append(json.loads(c.getresponse().read())["choices"][0]["text"])
print(json.dumps({"label": label, "set": prompt_set, "texts": texts}), flush=True)
