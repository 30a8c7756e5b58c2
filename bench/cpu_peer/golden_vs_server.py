#!/usr/bin/env python3
"""How far is a server from Hugging Face transformers on a golden model? (issue 48)

For each prompt of a golden file (tests/golden/<model>/golden.json: HF's token ids, its last-position
logits over the whole vocabulary and its 32 greedy ids), asks the server for the same 32 greedy
tokens with the top 5 log-probabilities at every position, and reports per prompt:

  - top5_max_diff: at the first generated position (the prompt's last logits, where HF's full row
    is known), max over the server's top-5 tokens of |server logprob - HF log_softmax(logits)|;
  - greedy_agree: how many leading greedy ids equal HF's (HF's smallest top-2 margin over its 32
    steps, greedy_min_margin, is printed beside: an engine whose error exceeds it may part from HF
    at that step without being wrong elsewhere).

The server must serve a GGUF file of the golden model with st_to_gguf.py's synthetic vocabulary
(--write-tokenizer: MODEL_DIR/tokenizer.json), whose texts map back to ids here for APIs that
answer with texts only (Spindle's OpenAI legacy logprobs).

usage: golden_vs_server.py --url URL --api llama|openai --golden GOLDEN.json --tokenizer TOKENIZER.json
       [--label L]
Prints one JSON line per prompt and a summary line. Python 3 standard library only (imports
check_logits.py from this folder).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_logits  # noqa: E402


def byte_decoder():
    """GPT-2's unicode-to-byte table (the inverse of its byte-to-unicode one)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def text_to_id(tokenizer_path):
    with open(tokenizer_path) as f:
        tj = json.load(f)
    dec = byte_decoder()
    out = {}
    for token, i in tj["model"]["vocab"].items():
        if all(c in dec for c in token):
            text = bytes(dec[c] for c in token).decode("utf-8", errors="replace")
        else:
            text = token
        out.setdefault(text, i)
    for a in tj.get("added_tokens", []):
        out.setdefault(a["content"], a["id"])
    return out


def log_softmax(row):
    m = max(row)
    s = sum(math.exp(v - m) for v in row)
    return [v - m - math.log(s) for v in row]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api", choices=["llama", "openai"], required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    with open(args.golden) as f:
        golden = json.load(f)
    ids = text_to_id(args.tokenizer)
    worst, agree_all = 0.0, []
    for n, p in enumerate(golden["prompts"]):
        positions = check_logits.generate(args.api, args.url, p["ids"], len(p["greedy"]), None)
        ref = log_softmax(p["last_logits"])
        diff = 0.0
        for tid, text, logprob in positions[0].top:
            tid = tid if tid is not None else ids.get(text)
            if tid is None:
                sys.exit(f"golden_vs_server.py: token text {text!r} not in {args.tokenizer}")
            diff = max(diff, abs(logprob - ref[tid]))
        got = [pos.id if pos.id is not None else ids.get(pos.text) for pos in positions]
        agree = next((i for i, (a, b) in enumerate(zip(got, p["greedy"])) if a != b), len(p["greedy"]))
        worst = max(worst, diff)
        agree_all.append(agree)
        print(json.dumps({"label": args.label, "prompt": n, "top5_max_diff": round(diff, 5), "greedy_agree": agree,
                          "of": len(p["greedy"]), "hf_greedy_min_margin": round(p.get("greedy_min_margin", 0), 5)}))
    print(json.dumps({"label": args.label, "summary": True, "top5_max_diff": round(worst, 5),
                      "greedy_agree": agree_all, "of": len(golden["prompts"][0]["greedy"])}))


if __name__ == "__main__":
    main()
