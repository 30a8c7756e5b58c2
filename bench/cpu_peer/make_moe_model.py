#!/usr/bin/env python3
"""A random-weight bf16 Qwen3-MoE checkpoint folder (config.json + model.safetensors) of a given
shape, for the GGUF mixture-of-experts comparisons with llama.cpp (issue 48): no torch, no download.

Every layer is sparse (llama.cpp's qwen3moe needs a router in every block). Weights are uniform with
standard deviation 1/sqrt(fan_in) (activations stay O(1)), the router's times --router-scale (default
8: router logits of standard deviation ~8, so that the top-k vs k+1 gaps are far wider than two
engines' rounding differences and a comparison of engines is not a comparison of near-tie
routings), norms 1, rounded to bf16 (round to
nearest even); the generator is seeded (numpy PCG64), so a shape and seed give the same bytes.
Tensors are written in name order with per-expert names (model.layers.N.mlp.experts.E.*), as
transformers saves them; bench/cpu_peer/st_to_gguf.py stacks them into ffn_*_exps.

Sizes: per layer 3 * E * F * H expert weights (bf16: 2 bytes each), so e.g. hidden 2048, 128
experts of width 768 write 1.21 GB per layer (the Qwen3-30B-A3B layer shape).

usage: make_moe_model.py OUT_DIR [--layers 2] [--hidden 256] [--experts 8] [--top-k 2]
       [--expert-width 256] [--heads 4] [--kv-heads 2] [--head-dim 64] [--vocab 1024] [--seed 1]
       [--router-scale 8]
Needs numpy (Debian's python3-numpy).
"""
import argparse
import json
import os
import struct

import numpy as np


def to_bf16(x):
    """float32 array -> uint16 bf16 bits, round to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--expert-width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--router-scale", type=float, default=8.0)
    args = ap.parse_args()
    h, e, f, d = args.hidden, args.experts, args.expert_width, args.head_dim
    q, kv = args.heads * d, args.kv_heads * d
    shapes = {"model.embed_tokens.weight": (args.vocab, h), "model.norm.weight": (h,),
              "lm_head.weight": (args.vocab, h)}
    for i in range(args.layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                       p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
                       p + "mlp.gate.weight": (e, h)})
        for x in range(e):
            shapes.update({f"{p}mlp.experts.{x}.gate_proj.weight": (f, h), f"{p}mlp.experts.{x}.up_proj.weight": (f, h),
                           f"{p}mlp.experts.{x}.down_proj.weight": (h, f)})
    names = sorted(shapes)
    header, offset = {}, 0
    for n in names:
        size = int(np.prod(shapes[n])) * 2
        header[n] = {"dtype": "BF16", "shape": list(shapes[n]), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    blob += b" " * ((8 - len(blob) % 8) % 8)
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    with open(os.path.join(args.out, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", len(blob)))
        out.write(blob)
        for n in names:
            shape = shapes[n]
            if len(shape) == 1:
                values = np.ones(shape, dtype=np.float32)
            else:
                bound = np.sqrt(3.0 / shape[1])  # uniform(-b, b) has standard deviation b / sqrt(3)
                values = rng.uniform(-bound, bound, size=shape).astype(np.float32)
                if n.endswith(".mlp.gate.weight"):
                    values *= args.router_scale
            out.write(to_bf16(values).tobytes())
    config = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": h,
        "intermediate_size": 4 * h, "moe_intermediate_size": f, "num_experts": e, "num_experts_per_tok": args.top_k,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": args.layers,
        "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads, "head_dim": d,
        "vocab_size": args.vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "bos_token_id": 0, "eos_token_id": 1, "use_sliding_window": False, "sliding_window": None,
    }
    with open(os.path.join(args.out, "config.json"), "w") as c:
        json.dump(config, c, indent=2)
    print(json.dumps({"out": args.out, "bytes": offset, "tensors": len(names),
                      "expert_bytes_per_layer": 3 * e * f * h * 2}))


if __name__ == "__main__":
    main()
