#!/usr/bin/env python3
"""Replays n-gram speculation over the greedy outputs of bench/spec's repeating prompts.

Greedy speculative output equals plain greedy output token for token, so which drafts are
accepted is fixed by the output alone: for each policy this walks every output, proposes as
NgramProposer does (longest suffix of prompt + output so far, windows [min, 12], most recent
match), accepts the longest agreeing prefix of the draft, and charges each step the measured cost
of a verify of k drafts in plain-step units (COST: bench_spec_verify thread CPU ratios on this
machine, kjv-tiny, 1 thread). Prints tokens / cost: the speed-up a policy can reach at most (no
proposal, sampling or server overhead). Input: repeating_tokens.json from collect_tokens.py (the
prompt ids come from a Python re-implementation of the byte-level BPE with ASCII letter classes,
one id short of the server's count: the BOS it adds, prepended here as id 0).
"""
import json
import os
import sys

COST = [1.0, 1.07, 1.30, 1.55, 1.78]  # k = 0..4 drafts: 1..5 rows
here = os.path.dirname(os.path.abspath(__file__))
data = json.load(open(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "repeating_tokens.json")))


def lookup(ctx, lo, hi, k):
    n_ctx = len(ctx)
    for n in range(min(hi, n_ctx - 1), lo - 1, -1):
        suffix = ctx[n_ctx - n:]
        for s in range(n_ctx - n - 1, -1, -1):
            if ctx[s:s + n] == suffix:
                return ctx[s + n:min(n_ctx, s + n + k)], n
    return [], 0


def expected(a, k):
    return sum(a ** i for i in range(k + 1))


def replay(lo, choose, cost=COST):
    """choose(draft, match_length, state) -> k; state: per match class [accepted, rejected]."""
    total_cost = total_tokens = 0.0
    state = {}
    for d in data:
        ctx, out, t = [0] + d["prompt"], d["output"], 0
        while t < len(out):
            draft, n = lookup(ctx + out[:t], lo, 12, 4)
            draft = draft[:len(out) - t - 1]
            k = choose(draft, n, state) if draft else 0
            a = 0
            while a < k and draft[a] == out[t + a]:
                a += 1
            if k:
                c = state.setdefault(min(n, 6), [0.0, 0.0])
                c[0], c[1] = 0.98 * c[0] + a, 0.98 * c[1] + (a < k)
            t += a + 1
            total_cost += cost[k]
        total_tokens += len(out)
    return total_tokens / total_cost


def all_drafts(draft, n, state):
    return len(draft)


def by_class(draft, n, state):
    acc, rej = state.get(min(n, 6), [0.0, 0.0])
    a = (acc + 1) / (acc + rej + 2)
    return max(range(len(draft) + 1), key=lambda k: expected(a, k) / COST[k])


for lo in (3, 2, 1):
    print(f"min window {lo}: every draft (k=4) {replay(lo, all_drafts):.3f}x, "
          f"count chosen per match-length acceptance {replay(lo, by_class):.3f}x")


def best_case(lo, cost):
    total_cost = total_tokens = 0.0
    for d in data:
        ctx, out, t = [0] + d["prompt"], d["output"], 0
        while t < len(out):
            draft, _ = lookup(ctx + out[:t], lo, 12, 4)
            draft = draft[:len(out) - t - 1]
            a = 0
            while a < len(draft) and draft[a] == out[t + a]:
                a += 1
            t += a + 1
            total_cost += cost[a]  # an oracle verifies exactly the drafts that will be accepted
        total_tokens += len(out)
    return total_tokens / total_cost
print(f"oracle (verifies exactly the accepted drafts), min window 1: {best_case(1, COST):.3f}x; "
      f"with a free verify: {best_case(1, [1.0] * 5):.3f}x")
