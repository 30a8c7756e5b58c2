#!/usr/bin/env python3
"""The peer: Hugging Face transformers generate() with a static KV cache on the same folder, random
token-id prompts of --prompt-tokens, --output-tokens new tokens (min_new_tokens = max, greedy), at
each batch size; output tok/s = batch x new tokens / wall time of generate() (after one warm-up
generate of the same shapes). Prints one JSON line per batch size."""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--batches", default="1,32")
ap.add_argument("--prompt-tokens", type=int, default=512)
ap.add_argument("--output-tokens", type=int, default=128)
args = ap.parse_args()
model = AutoModelForCausalLM.from_pretrained(args.dir, torch_dtype=torch.bfloat16, device_map="cuda")
model.generation_config.pad_token_id = model.config.eos_token_id
vocab = model.config.vocab_size
for b in [int(x) for x in args.batches.split(",")]:
    ids = torch.randint(0, vocab - 1, (b, args.prompt_tokens), device="cuda")
    kw = dict(max_new_tokens=args.output_tokens, min_new_tokens=args.output_tokens, do_sample=False,
              cache_implementation="static", attention_mask=torch.ones_like(ids))
    model.generate(ids, **kw)  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, **kw)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    new = (out.shape[1] - ids.shape[1]) * b
    print(json.dumps({"peer": "hf_transformers_static_cache", "batch": b, "output_tokens": new, "wall_s": wall,
                      "output_tok_s": new / wall, "torch": torch.__version__}), flush=True)
