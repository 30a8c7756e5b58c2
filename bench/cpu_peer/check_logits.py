#!/usr/bin/env python3
"""Does a server compute the same model as llama-server on the same GGUF file? (issue 45, item 5)

Sends PROMPTS random token-id prompts (ids uniform in [--min-id, --vocab), lengths in
[--prompt-tokens / 2, --prompt-tokens]), asks both servers for TOKENS greedy tokens with the top 5
log-probabilities at every position, and compares, per prompt, position by position while the two
greedy sequences agree (after a difference the contexts differ, so the prompt ends there):

  - ids: the chosen tokens must be identical wherever the reference's top-2 margin
    (logprob of its first minus its second choice) exceeds 10 x TOLERANCE; where the margin is
    smaller a different choice is a tie-break, reported and not a failure (the prompt ends);
  - top-5 logprobs: every token in both top-5 lists within TOLERANCE (nats) of each other; a token
    in one list but not the other must lie within TOLERANCE of the other list's 5th logprob (it
    may have dropped just below it), else it is a failure.

The tolerance is not a constant to pick: each engine rounds activations its own way before its
quantized products (Spindle: int8 per 32, f32 scale; llama.cpp: Q8_K per 256 for K-quant weights,
Q8_0 per 32 with an fp16 scale for Q8_0 weights, bf16 for BF16 weights) and its KV cache (bf16 /
f16), so each is off the float64 forward over the dequantized weights by its own rounding error, and
the two by up to the sum. f64_reference.py measures both against that forward and derives, per file,
TOLERANCE = 1.5 x (the largest gap of llama.cpp's modelled rounding to the exact forward + that of
Spindle's), every term computed in float64 alone (f64_check.sh runs it all, then this script on
fresh prompts at the derived value; 1.5: the largest of 256 positions varies by up to 1.34x between
samples of the same rounding). Measured 2026-12-07 (bench/results/2026-12-07-devvm-zen4-f64-reference):
1B-shape Q4_K_M 0.286, Q8_0 0.197; kjv-tiny Q8_0 0.266, Q4_K_M 0.350; BF16 files keep 0.1
(llama.cpp's bf16 rounding: 0.021 on kjv-tiny; Spindle exact: 0.0000). At such a derived
tolerance this two-way check misses a 10% scaling of one ffn_down (perturb_gguf.py) that
f64_reference.py's three-way verdict finds: for quantized files the three-way check (f64_check.sh)
is the acceptance check, this one a smoke test. With random weights no top-2 margin reaches 10 x such a
tolerance, so the id half of the check does not apply there; f64_reference.py compares greedy
choices with the f64 argmax instead.

Tokens are matched by id where both answers carry ids (llama-server's /completion and its
/v1/completions "content" logprobs), else by their text (OpenAI's legacy completion logprobs:
{"tokens", "token_logprobs", "top_logprobs": [{text: logprob}]}, which Spindle returns).

APIs (--reference-api, --candidate-api):
  llama   POST URL/completion   {"prompt": ids, "n_predict", "n_probs": 5, "temperature": 0, ...}
  openai  POST URL/v1/completions {"prompt": ids, "max_tokens", "logprobs": 5, "temperature": 0, ...}
Defaults: the reference is llama-server's native API, the candidate the OpenAI one (Spindle).
--llama and --spindle are the old names of --reference and --candidate (bench/cpu_peer/run.sh).

--negative-control: the run is expected to find a difference (e.g. a GGUF whose Q/K rows were
not un-permuted, or a perturbed copy): exit 0 when the comparison fails, 1 when it passes.

Prints one JSON line per prompt, then a summary line; exit status 0 when the check passes (or,
with --negative-control, fails), 1 otherwise, 2 on a usage or server error. Python 3 standard
library only.

usage: check_logits.py --reference URL --candidate URL --vocab V [--tolerance 0.1] [--prompts 8]
       [--tokens 32] [--prompt-tokens 16] [--min-id 258] [--seed 1] [--model NAME] [--prompts-from GOLDEN]
       [--reference-api llama|openai] [--candidate-api openai|llama] [--match auto|text]
       [--negative-control] [--label L]
"""
import argparse
import json
import random
import sys
import urllib.error
import urllib.request

TOP = 5


class Position:
    """One generated token: its id (None when the API gives none), text, logprob, and the top-5
    alternatives as a list of (id or None, text, logprob), best first."""

    def __init__(self, tid, text, logprob, top):
        self.id, self.text, self.logprob = tid, text, logprob
        self.top = sorted(top, key=lambda t: -t[2])


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"check_logits.py: {url} answered {e.code}: {e.read()[:500]!r}")
    except (urllib.error.URLError, OSError) as e:
        sys.exit(f"check_logits.py: {url}: {e}")


def from_content(entries):
    """llama-server's per-token list ({"id", "token", "logprob", "top_logprobs": [...]})."""
    out = []
    for e in entries:
        top = [(t.get("id"), t["token"], t["logprob"]) for t in e["top_logprobs"]]
        out.append(Position(e.get("id"), e["token"], e["logprob"], top))
    return out


def from_legacy(lp):
    """OpenAI's legacy completion logprobs (texts only)."""
    out = []
    for text, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        out.append(Position(None, text, logprob, [(None, t, v) for t, v in top.items()]))
    return out


def generate(api, url, prompt, tokens, model):
    """The greedy positions a server returns for a token-id prompt."""
    if api == "llama":
        r = post(url + "/completion", {"prompt": prompt, "n_predict": tokens, "temperature": 0, "n_probs": TOP,
                                       "ignore_eos": True, "cache_prompt": False})
        return from_content(r["completion_probabilities"])
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "logprobs": TOP, "ignore_eos": True}
    if model:
        body["model"] = model
    lp = post(url + "/v1/completions", body)["choices"][0]["logprobs"]
    if lp is None:
        sys.exit(f"check_logits.py: {url}/v1/completions returned no logprobs")
    return from_content(lp["content"]) if "content" in lp else from_legacy(lp)


def key(entry_id, text, use_ids):
    return entry_id if use_ids else text


def is_control_name(text):
    return len(text) > 2 and text.startswith("<") and text.endswith(">")


def pair_control_tokens(r, c):
    """Matching by text: llama-server gives a control token's text as '' where Spindle gives its
    name ('<|im_end|>'). Where one side lists '' and the other exactly one control-like name the
    first lacks, they are the same token: the '' entry is renamed."""
    for mine, other in ((r, c), (c, r)):
        if "" in mine and "" not in other:
            names = [k for k in other if is_control_name(k) and k not in mine]
            if len(names) == 1:
                mine[names[0]] = mine.pop("")


def same_token(a, b):
    return a == b or ("" in (a, b) and is_control_name(a + b))


def compare_top(ref, cand, use_ids, tol):
    """Failures (strings) of the top-5 logprob comparison at one position, and the largest
    difference over the common tokens."""
    r = {key(i, t, use_ids): v for i, t, v in ref.top}
    c = {key(i, t, use_ids): v for i, t, v in cand.top}
    if not use_ids:
        pair_control_tokens(r, c)
    failures, worst = [], 0.0
    for k in r.keys() & c.keys():
        worst = max(worst, abs(r[k] - c[k]))
        if abs(r[k] - c[k]) > tol:
            failures.append(f"token {k!r}: logprob {c[k]:.4f} vs reference {r[k]:.4f}")
    for mine, other, who in ((r, c, "reference"), (c, r, "candidate")):
        if len(other) < TOP:
            continue
        floor = min(other.values())
        for k in mine.keys() - other.keys():
            if mine[k] > floor + tol:
                failures.append(f"token {k!r} ({who} logprob {mine[k]:.4f}) missing from the other top {TOP} "
                                f"(whose 5th is {floor:.4f})")
    return failures, worst


def compare_prompt(ref, cand, tol, match="auto"):
    """Per-prompt result: positions compared, ids checked, tie-break divergence, failures. match:
    "auto" (ids where both sides give them, else texts) or "text"."""
    use_ids = match == "auto" and all(p.id is not None for p in ref + cand)
    use_ids = use_ids and all(t[0] is not None for p in ref + cand for t in p.top)
    res = {"compared": 0, "ids_checked": 0, "tie_break_at": None, "max_abs_logprob_diff": 0.0, "failures": []}
    for i, (r, c) in enumerate(zip(ref, cand)):
        res["compared"] += 1
        fails, worst = compare_top(r, c, use_ids, tol)
        res["max_abs_logprob_diff"] = max(res["max_abs_logprob_diff"], worst)
        res["failures"] += [f"position {i}: {f}" for f in fails]
        margin = r.top[0][2] - r.top[1][2] if len(r.top) > 1 else float("inf")
        same = r.id == c.id if use_ids else same_token(r.text, c.text)
        if margin > 10 * tol:
            res["ids_checked"] += 1
            if not same:
                res["failures"].append(f"position {i}: chose {c.text!r}, reference {r.text!r} "
                                       f"(reference top-2 margin {margin:.3f} > 10 x tolerance)")
        if not same:
            if margin <= 10 * tol:
                res["tie_break_at"] = {"position": i, "margin": round(margin, 4)}
            break
    if len(ref) != len(cand) and res["tie_break_at"] is None and not res["failures"]:
        res["failures"].append(f"lengths differ: {len(cand)} tokens vs reference {len(ref)}")
    res["matched_by"] = "id" if use_ids else "text"
    return res


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", "--llama", dest="reference", required=True, help="reference server URL")
    ap.add_argument("--candidate", "--spindle", dest="candidate", required=True, help="candidate server URL")
    ap.add_argument("--reference-api", choices=["llama", "openai"], default="llama")
    ap.add_argument("--candidate-api", choices=["llama", "openai"], default="openai")
    ap.add_argument("--vocab", type=int, required=True, help="vocabulary size (prompt ids are below it)")
    ap.add_argument("--min-id", type=int, default=258, help="smallest prompt id (default past the bench "
                    "vocabulary's control and byte ids)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--tolerance", type=float, default=0.1, help="nats (default 0.1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="", help="the OpenAI request's model field (default none)")
    ap.add_argument("--match", choices=["auto", "text"], default="auto",
                    help="match tokens by id where both sides give ids (auto) or always by text")
    ap.add_argument("--negative-control", action="store_true", help="expect a difference: exit 0 when found")
    ap.add_argument("--label", default="")
    ap.add_argument("--prompts-from", metavar="GOLDEN_JSON",
                    help="use the prompts of a golden file (tests/golden/<model>/golden.json: 'prompts'[i]"
                         "['ids']) instead of random ones; --prompts, --prompt-tokens, --min-id, --seed unused")
    args = ap.parse_args()
    if not 0 <= args.min_id < args.vocab or args.prompts < 1 or args.tokens < 1 or args.prompt_tokens < 2:
        ap.error("need 0 <= --min-id < --vocab, --prompts >= 1, --tokens >= 1, --prompt-tokens >= 2")
    return args


def main():
    args = parse_args()
    rng = random.Random(args.seed)
    total = {"prompts": 0, "positions": 0, "ids_checked": 0, "tie_breaks": 0, "failed_prompts": 0,
             "max_abs_logprob_diff": 0.0}
    prompts = []
    if args.prompts_from:
        with open(args.prompts_from) as f:
            prompts = [p["ids"] for p in json.load(f)["prompts"]]
    for p in range(len(prompts) if prompts else args.prompts):
        prompt = prompts[p] if prompts else [rng.randrange(args.min_id, args.vocab)
                                             for _ in range(rng.randint(args.prompt_tokens // 2, args.prompt_tokens))]
        ref = generate(args.reference_api, args.reference, prompt, args.tokens, args.model)
        cand = generate(args.candidate_api, args.candidate, prompt, args.tokens, args.model)
        res = compare_prompt(ref, cand, args.tolerance, args.match)
        print(json.dumps({"label": args.label, "prompt_index": p, "prompt": prompt,
                          "reference": [x.text for x in ref], "candidate": [x.text for x in cand], **res}))
        total["prompts"] += 1
        total["positions"] += res["compared"]
        total["ids_checked"] += res["ids_checked"]
        total["tie_breaks"] += res["tie_break_at"] is not None
        total["failed_prompts"] += bool(res["failures"])
        total["max_abs_logprob_diff"] = max(total["max_abs_logprob_diff"], res["max_abs_logprob_diff"])
    passed = total["failed_prompts"] == 0
    ok = passed != args.negative_control
    verdict = ("PASS" if passed else "FAIL") + (" (negative control: a difference was required)"
                                                  if args.negative_control else "")
    print(json.dumps({"label": args.label, "summary": verdict, "ok": ok, "tolerance": args.tolerance,
                      "id_margin": 10 * args.tolerance, **total}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
