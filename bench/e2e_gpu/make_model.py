#!/usr/bin/env python3
"""Writes a random-weight Hugging Face Llama folder for bench/e2e_gpu: config.json, tokenizer.json
(a byte-level BPE vocabulary of exactly vocab_size tokens: the 256 byte symbols, then plain ASCII
filler tokens, so every id decodes to text) and model.safetensors (bf16, N(0, 0.02) on the GPU, norms
1.0). Shapes: 8b (Llama-3.1-8B: 16.06 GB), 1b (Llama-3.2-1B), tiny (for a dry run).

--fp8 writes the same weights as an FP8 checkpoint (issue 47's e2e rows): the seven projections of each
layer as float8_e4m3fn with their scales, the embedding, norms and lm_head bf16:
  block128  quant_method "fp8", weight_block_size [128, 128]: X.weight_scale_inv F32
            [ceil(out/128), ceil(in/128)], each block's absmax / 448 (transformers' FineGrainedFP8 layout)
  channel   quant_method "compressed-tensors", strategy "channel", dynamic per-token activations:
            X.weight_scale F32 [out, 1], each row's absmax / 448 (LLM Compressor's FP8_DYNAMIC layout)

usage: make_model.py DIR [--shape 8b|1b|tiny] [--fp8 block128|channel]
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1024, tie_word_embeddings=False),
}


def byte_symbols():
    """GPT-2's byte-to-unicode table: the 256 symbols of a byte-level vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def tokenizer_json(vocab_size):
    vocab = {}
    for s in byte_symbols():
        vocab[s] = len(vocab)
    eos = vocab_size - 1
    i = 0
    while len(vocab) < eos:
        vocab[f"w{i}"] = len(vocab)
        i += 1
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eos, "content": "<|eos|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": []},
    }


FP8_MAX = 448.0
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_fp8(w, mode):
    """(codes float8_e4m3fn [out, in], scale f32) of a bf16 weight [out, in], scale per `mode`; on the GPU."""
    w = w.to("cuda", torch.float32)
    out, inn = w.shape
    if mode == "channel":
        scale = (w.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
        codes = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return codes.cpu(), scale.cpu()
    bo, bi = -(-out // 128), -(-inn // 128)
    padded = torch.zeros(bo * 128, bi * 128, device="cuda")
    padded[:out, :inn] = w
    blocks = padded.view(bo, 128, bi, 128)
    scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)  # [bo, bi]
    codes = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).view(bo * 128, bi * 128)[:out, :inn]
    return codes.to(torch.float8_e4m3fn).cpu(), scale.cpu()


def quantization_config(mode):
    if mode == "block128":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                            "dynamic": False},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                      "dynamic": True}}}}


def to_fp8(t, mode):
    """The tensors of a bf16 checkpoint with each projection replaced by its FP8 codes and scale."""
    q = {}
    for name, w in t.items():
        if name.rsplit(".", 2)[-2] not in PROJECTIONS:
            q[name] = w
            continue
        codes, scale = quantize_fp8(w, mode)
        q[name] = codes
        q[name + ("_scale_inv" if mode == "block128" else "_scale")] = scale
    return q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--fp8", choices=("block128", "channel"), help="write an FP8 checkpoint of the same weights")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    os.makedirs(args.dir, exist_ok=True)
    h, i, v = s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    heads, kv = s["num_attention_heads"], s["num_key_value_heads"]
    d = h // heads
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8448,
        "attention_bias": False, "mlp_bias": False, "head_dim": d, "bos_token_id": v - 1, "eos_token_id": v - 1,
        **s,
    }
    if args.fp8:
        config["quantization_config"] = quantization_config(args.fp8)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(args.dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(v), f)
    with open(os.path.join(args.dir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|eos|>", "model_max_length": 8448, "tokenizer_class": "PreTrainedTokenizerFast"}, f)

    g = torch.Generator(device="cuda").manual_seed(0)
    def rand(*shape):
        return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)
    t = {"model.embed_tokens.weight": rand(v, h), "model.norm.weight": ones(h)}
    if not s["tie_word_embeddings"]:
        t["lm_head.weight"] = rand(v, h)
    for l in range(s["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ones(h)
        t[p + "post_attention_layernorm.weight"] = ones(h)
        t[p + "self_attn.q_proj.weight"] = rand(heads * d, h)
        t[p + "self_attn.k_proj.weight"] = rand(kv * d, h)
        t[p + "self_attn.v_proj.weight"] = rand(kv * d, h)
        t[p + "self_attn.o_proj.weight"] = rand(h, heads * d)
        t[p + "mlp.gate_proj.weight"] = rand(i, h)
        t[p + "mlp.up_proj.weight"] = rand(i, h)
        t[p + "mlp.down_proj.weight"] = rand(h, i)
    if args.fp8:
        t = to_fp8(t, args.fp8)
    save_file(t, os.path.join(args.dir, "model.safetensors"), metadata={"format": "pt"})
    total = sum(x.numel() * x.element_size() for x in t.values())
    print(json.dumps({"dir": args.dir, "shape": args.shape, "fp8": args.fp8, "weight_bytes": total}))


if __name__ == "__main__":
    main()
