#!/usr/bin/env python3
"""Golden mixture-of-experts models (issue 48) from HF transformers, the independent implementation.

Run where torch and transformers are installed (the GPU host; a CPU is enough):

    python3 tools/golden/make_moe_golden.py --out tests/golden

Writes, beside make_golden.py's dense models and with its tokenizers, prompts and weight scaling:
  qwen3-moe-{f32,bf16}/   Qwen3MoeForCausalLM: 8 experts, top 2, norm_topk_prob, layer 1 dense
                          (mlp_only_layers), q/k RMSNorm
  mixtral-{f32,bf16}/     MixtralForCausalLM: 4 experts, top 2 (softmax over the top-2 logits)
  qwen2-moe-{f32,bf16}/   Qwen2MoeForCausalLM: 8 experts, top 2, norm_topk_prob false, a shared
                          expert with a sigmoid gate, q/k/v bias
each with golden.json (make_golden.py's format: last-position logits and 32 greedy tokens per
prompt, f32 compute on the stored weights), and MANIFEST_moe.json: per model the seed, the
smallest greedy top-2 logit margin, the smallest router margin (below) and the expert tensor
layout transformers saved.

Router margin: at every position of every prompt + its greedy continuation and every sparse
layer, the gap between the k-th and (k+1)-th largest router logits (float64 product of the layer's
MoE input and the stored router weight). A seed is kept only when that gap is at least
--min-router-margin (1e-3: ten times the 1e-4 a router computed in f32 from bf16 weights may move),
so that Spindle's top-k choice cannot differ from the reference's by rounding.
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as dense  # noqa: E402  (the tokenizers, prompts, scaling and recording)

TOP_K = 2


def moe_specs(tokenizers):
    common = dict(vocab_size=dense.VOCAB, hidden_size=128, max_position_embeddings=256, rms_norm_eps=1e-5)
    tq = tokenizers["bytelevel-qwen2"]
    tm = tokenizers["metaspace"]
    return {
        "qwen3-moe": ("qwen", Qwen3MoeForCausalLM, Qwen3MoeConfig(
            **common, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            intermediate_size=256, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=TOP_K,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], rope_theta=1000000.0,
            tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
            bos_token_id=tq.token_to_id("<|endoftext|>"), eos_token_id=tq.token_to_id("<|im_end|>"))),
        "mixtral": ("mistral", MixtralForCausalLM, MixtralConfig(
            **common, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            intermediate_size=96, num_local_experts=4, num_experts_per_tok=TOP_K, rope_theta=1000000.0,
            sliding_window=None, tie_word_embeddings=False, bos_token_id=tm.token_to_id("<s>"),
            eos_token_id=tm.token_to_id("</s>"))),
        "qwen2-moe": ("qwen", Qwen2MoeForCausalLM, Qwen2MoeConfig(
            **common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=256, moe_intermediate_size=64, shared_expert_intermediate_size=128, num_experts=8,
            num_experts_per_tok=TOP_K, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[],
            rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False,
            bos_token_id=tq.token_to_id("<|endoftext|>"), eos_token_id=tq.token_to_id("<|im_end|>"))),
    }


def sparse_blocks(model):
    """The MoE blocks: modules holding a router `gate` (with a weight of [experts, hidden]) and `experts`."""
    return [m for m in model.modules()
            if hasattr(m, "experts") and hasattr(m, "gate") and hasattr(m.gate, "weight")]


@torch.no_grad()
def min_router_margin(model, sequences):
    """The smallest gap between the k-th and (k+1)-th router logit over every position and sparse layer."""
    blocks = sparse_blocks(model)
    assert blocks, "no MoE block found"
    margins = []

    def hook(module, args, kwargs):
        x = (args[0] if args else kwargs["hidden_states"]).reshape(-1, module.gate.weight.shape[-1]).double()
        logits = x @ module.gate.weight.double().t()
        top = torch.topk(logits, TOP_K + 1, dim=-1).values
        margins.append(float((top[:, TOP_K - 1] - top[:, TOP_K]).min()))

    handles = [b.register_forward_pre_hook(hook, with_kwargs=True) for b in blocks]
    try:
        for seq in sequences:
            model(torch.tensor([seq]))
    finally:
        for h in handles:
            h.remove()
    return min(margins)


def expert_layout(path):
    from safetensors import safe_open
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        names = [n for n in f.keys() if ".experts." in n or n.endswith("experts.gate_up_proj")
                 or n.endswith("experts.down_proj")]
    fused = any(n.endswith("gate_up_proj") or n.endswith("experts.down_proj") for n in names)
    return {"fused_3d": fused, "example": sorted(names)[:3]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--min-margin", type=float, default=0.05, help="greedy top-2 logit margin to aim for")
    ap.add_argument("--min-router-margin", type=float, default=1e-3)
    ap.add_argument("--attempts", type=int, default=40)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    tokenizers = dense.make_tokenizers()
    info = {"transformers": transformers.__version__, "torch": torch.__version__, "min_router_margin_required":
            args.min_router_margin, "models": {}}
    for name, (family, cls, config) in moe_specs(tokenizers).items():
        tok_obj = tokenizers[dense.FAMILIES[family]["tokenizer"]]
        for suffix, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            full = f"{name}-{suffix}"
            best = None  # (greedy margin, seed) of the best seed whose router margin is enough
            for attempt in range(args.attempts):
                seed = 2000 + attempt
                ref, fast = dense.save_model(args.out, full, family, cls, config, tok_obj, seed, dtype)
                records, margin = dense.record_model(ref, fast, dense.PROMPTS)
                router = min_router_margin(ref, [r["ids"] + r["greedy"] for r in records])
                print(f"{full}: seed {seed} greedy margin {margin:.4f} router margin {router:.2e}")
                if router >= args.min_router_margin and (best is None or margin > best[0]):
                    best = (margin, seed)
                if best is not None and best[0] >= args.min_margin:
                    break
            if best is None:
                raise SystemExit(f"{full}: no seed in {args.attempts} met the router margin")
            seed = best[1]
            ref, fast = dense.save_model(args.out, full, family, cls, config, tok_obj, seed, dtype)
            records, margin = dense.record_model(ref, fast, dense.PROMPTS)
            router = min_router_margin(ref, [r["ids"] + r["greedy"] for r in records])
            with open(os.path.join(args.out, full, "golden.json"), "w") as fh:
                json.dump({"model": full, "dtype": suffix, "seed": seed, "compute": "float32",
                           "prompts": records}, fh, ensure_ascii=False)
            info["models"][full] = {"seed": seed, "min_greedy_margin": margin, "min_router_margin": router,
                                    "experts": expert_layout(os.path.join(args.out, full))}
            print(f"{full}: seed {seed}, greedy margin {margin:.4f}, router margin {router:.2e}")
    with open(os.path.join(args.out, "MANIFEST_moe.json"), "w") as fh:
        json.dump(info, fh, indent=1)


if __name__ == "__main__":
    main()
