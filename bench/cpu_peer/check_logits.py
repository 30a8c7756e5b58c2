#!/usr/bin/env python3
"""Greedy tokens and log-probabilities of one token-id prompt from a running `spindle serve` and a
running llama-server on the same weights (bench/cpu_peer/run.sh starts both). Checks that the GGUF
computes the same model: the greedy ids agree and the chosen tokens' log-probabilities are close.
A wrong q/k row order (HF rotate_half vs GGML's interleaved rope) shows up as large differences
from the second prompt position on.

usage: check_logits.py --spindle URL --llama URL --vocab V [--prompt-tokens 16] [--tokens 8] [--seed 1]
Prints one JSON line; exits 1 when the greedy ids differ before position --min-agree (default 4)
or a log-probability of a common top token differs by more than --max-logprob-diff (default 0.1).
"""
import argparse
import json
import random
import sys
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spindle", required=True)
    ap.add_argument("--llama", required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-agree", type=int, default=4)
    ap.add_argument("--max-logprob-diff", type=float, default=0.1)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    prompt = [rng.randrange(258, args.vocab) for _ in range(args.prompt_tokens)]  # past the control and byte ids

    s = post(args.spindle + "/v1/completions",
             {"prompt": prompt, "max_tokens": args.tokens, "temperature": 0, "logprobs": 5, "ignore_eos": True})
    lp = s["choices"][0]["logprobs"]
    s_tokens = lp["tokens"]
    s_top = lp["top_logprobs"]  # per position {text: logprob}

    l = post(args.llama + "/completion",
             {"prompt": prompt, "n_predict": args.tokens, "temperature": 0, "n_probs": 5, "ignore_eos": True,
              "cache_prompt": False})
    probs = l["completion_probabilities"]
    l_tokens = [p["token"] for p in probs]
    l_top = [{t["token"]: t["logprob"] for t in p["top_logprobs"]} for p in probs]

    agree = 0
    while agree < min(len(s_tokens), len(l_tokens)) and s_tokens[agree] == l_tokens[agree]:
        agree += 1
    # Compare log-probabilities of the tokens both list among their top 5, at the agreeing positions.
    diffs = []
    for i in range(agree):
        common = set(s_top[i]) & set(l_top[i])
        diffs.append(max(abs(s_top[i][t] - l_top[i][t]) for t in common) if common else float("inf"))
    result = {
        "label": args.label, "prompt": prompt, "spindle": s_tokens, "llama.cpp": l_tokens,
        "greedy_agree": agree, "of": args.tokens,
        "max_abs_logprob_diff_per_position": [round(d, 5) for d in diffs],
        "spindle_chosen_logprobs": [round(x, 4) for x in lp["token_logprobs"]],
        "llama_chosen_logprobs": [round(p["logprob"], 4) for p in probs],
    }
    print(json.dumps(result))
    ok = agree >= min(args.min_agree, args.tokens) and all(d <= args.max_logprob_diff for d in diffs)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
