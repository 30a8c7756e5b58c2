#!/usr/bin/env python3
"""A 128x128-block FP8 checkpoint and what HF transformers computes on it (issue 47, item 4).

Run on the GPU host (transformers reads `quant_method: fp8` with `weight_block_size` on CUDA only):

    python3 tools/golden/make_fp8_golden.py --src tests/golden/llama-gqa-f32 --out tests/golden/llama-gqa-fp8block

The folder is written here from the format's definition, not by Spindle: every q/k/v/o/gate/up/down
weight W of --src becomes float8_e4m3fn codes c = W / s per 128x128 block, s = max|W| / 448 over the
block (1 where the block is all zero), stored as `weight_scale_inv` [ceil(out/128), ceil(in/128)]
(dequantized = c * s: the name notwithstanding); embeddings, norms and lm_head stay as stored.

golden.json, per prompt of --src's golden.json:
  ids                     the prompt
  f64_last_logits         a float64 torch forward over the dequantized weights (c * s in float64)
  f64_greedy              32 greedy tokens of that forward
  f64_margins             its top-2 margin at each of those steps
  hf_last_logits          transformers on the folder (hf_path says which path): its FP8 kernels (per-
                          token-group activation quantization, block-FP8 product) where the `kernels`
                          package is installed, else its dequantize-at-load reading of the format
  hf_greedy               32 greedy tokens of that path
  hf_steps                for each greedy step of hf_greedy: hf's top-2 margin, and the largest
                          |hf - f64| logit difference at that step (f64 teacher-forced on hf's tokens)
A consumer may demand agreement with hf_greedy only up to the first step whose margin is not above
twice that step's hf-f64 difference (where transformers' own activation rounding could flip it).
"""
import argparse
import json
import math
import os
import shutil

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

BLOCK = 128
E4M3_MAX = 448.0
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_block(w):
    """w [out, in] float -> (codes float8_e4m3fn [out, in], scale_inv float32 [ceil(out/128), ceil(in/128)])."""
    w = w.double()
    out, inp = w.shape
    bo, bi = math.ceil(out / BLOCK), math.ceil(inp / BLOCK)
    scale = torch.ones(bo, bi, dtype=torch.float64)
    for r in range(bo):
        for c in range(bi):
            amax = w[r * BLOCK:(r + 1) * BLOCK, c * BLOCK:(c + 1) * BLOCK].abs().max().item()
            if amax > 0:
                scale[r, c] = amax / E4M3_MAX
    full = scale.repeat_interleave(BLOCK, 0)[:out].repeat_interleave(BLOCK, 1)[:, :inp]
    scaled = (w / full).clamp(-E4M3_MAX, E4M3_MAX)
    return scaled.to(torch.float32).to(torch.float8_e4m3fn), scale.to(torch.float32)


def dequantize_block(codes, scale_inv):
    out, inp = codes.shape
    full = scale_inv.double().repeat_interleave(BLOCK, 0)[:out].repeat_interleave(BLOCK, 1)[:, :inp]
    return codes.to(torch.float64) * full


def write_folder(src, out):
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(src):
        if name not in ("model.safetensors", "config.json", "golden.json"):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    tensors = load_file(os.path.join(src, "model.safetensors"))
    written, dequantized = {}, {}
    for name, t in tensors.items():
        if name.endswith(".weight") and name.split(".")[-2] in PROJECTIONS:
            codes, scale_inv = quantize_block(t)
            written[name] = codes
            written[name[:-len("weight")] + "weight_scale_inv"] = scale_inv
            dequantized[name] = dequantize_block(codes, scale_inv)
        else:
            written[name] = t
            dequantized[name] = t.double()
    save_file(written, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ["lm_head"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return dequantized


def float64_model(src, dequantized):
    config = AutoConfig.from_pretrained(src)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float64).eval()
    missing, unexpected = model.load_state_dict(dequantized, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    assert not missing and not unexpected, (missing, unexpected)
    return model


@torch.no_grad()
def last_logits(model, ids, device):
    return model(torch.tensor([ids], device=device)).logits[0, -1].double().cpu()


@torch.no_grad()
def record(prompt_ids, hf, hf_device, f64, steps):
    seq = list(prompt_ids)
    hf_first = f64_first = None
    hf_steps = []
    for _ in range(steps):
        h = last_logits(hf, seq, hf_device)
        r = last_logits(f64, seq, "cpu")
        if hf_first is None:
            hf_first, f64_first = h, r
        top = torch.topk(h, 2)
        hf_steps.append({"margin": float(top.values[0] - top.values[1]), "max_diff_f64": float((h - r).abs().max())})
        seq.append(int(top.indices[0]))
    hf_greedy = seq[len(prompt_ids):]
    seq = list(prompt_ids)
    f64_margins = []
    for _ in range(steps):
        top = torch.topk(last_logits(f64, seq, "cpu"), 2)
        f64_margins.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return {"ids": list(prompt_ids), "f64_last_logits": [float(x) for x in f64_first],
            "f64_greedy": seq[len(prompt_ids):], "f64_margins": f64_margins,
            "hf_last_logits": [float(x) for x in hf_first],
            "hf_greedy": hf_greedy, "hf_steps": hf_steps}


def load_transformers(folder, dtype, probe_ids):
    """transformers on the folder: its FP8 kernels where they run, else its dequantize-at-load path.

    transformers 5 runs block-FP8 products through the `kernels` package's finegrained-fp8 kernel;
    where that package is missing (the GPU host has no registry) the forward raises ImportError, and
    FineGrainedFP8Config(dequantize=True) has transformers itself read the codes and
    weight_scale_inv into plain weights (its reading of the format, computed in `dtype`)."""
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, device_map="cuda").eval()
    assert any("fp8" in type(m).__name__.lower() for m in hf.modules()), "transformers did not load FP8 layers"
    try:
        last_logits(hf, probe_ids, "cuda")
        return hf, "fp8 kernels (per-token-group activation quantization, block-FP8 product)"
    except ImportError as e:
        print(f"transformers' FP8 kernels unavailable ({str(e)[:120]}); dequantizing at load")
    from transformers import FineGrainedFP8Config
    config = FineGrainedFP8Config(weight_block_size=(BLOCK, BLOCK), modules_to_not_convert=["lm_head"], dequantize=True)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, device_map="cuda", quantization_config=config).eval()
    assert not any("fp8" in type(m).__name__.lower() for m in hf.modules())
    return hf, f"FineGrainedFP8Config(dequantize=True): weights dequantized by transformers at load, {dtype} compute"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default="tests/golden/llama-gqa-f32")
    ap.add_argument("--out", default="tests/golden/llama-gqa-fp8block")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--hf-dtype", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    dequantized = write_folder(args.src, args.out)
    f64 = float64_model(args.src, dequantized)
    with open(os.path.join(args.src, "golden.json")) as f:
        prompts = json.load(f)["prompts"]
    hf, hf_path = load_transformers(args.out, getattr(torch, args.hf_dtype), prompts[0]["ids"])
    kinds = sorted({type(m).__name__ for m in hf.modules() if "linear" in type(m).__name__.lower()})
    records = [dict(text=p["text"], **record(p["ids"], hf, "cuda", f64, args.steps)) for p in prompts]
    golden = {"model": os.path.basename(args.out.rstrip("/")), "source": os.path.basename(args.src.rstrip("/")),
              "transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0), "hf_dtype": args.hf_dtype, "hf_path": hf_path,
              "hf_layer_types": kinds,
              "prompts": records}
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(golden, f, ensure_ascii=False)
    for r in records:
        agree = next((i for i, (a, b) in enumerate(zip(r["hf_greedy"], r["f64_greedy"])) if a != b), args.steps)
        worst = max(s["max_diff_f64"] for s in r["hf_steps"])
        print(f"{r['text'][:24]!r}: hf and f64 greedy agree for {agree} tokens; max |hf - f64| {worst:.4g}; "
              f"min hf margin {min(s['margin'] for s in r['hf_steps']):.4g}")


if __name__ == "__main__":
    main()
