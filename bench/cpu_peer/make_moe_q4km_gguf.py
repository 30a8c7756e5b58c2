#!/usr/bin/env python3
"""A Qwen3-MoE GGUF file of a given shape (default: Qwen3-30B-A3B, 48 layers) written directly as
llama-quantize's Q4_K_M would lay it out, from random valid Q4_K / Q6_K blocks, tensor by tensor:
no bf16 or Q8_0 intermediate, so the disk holds only the output (~18.6 GB at full depth) and memory
about one tensor (the largest, a Q6_K ffn_down_exps, 165 MB) plus numpy temporaries (issue 48,
the CPU bench; the route through a bf16 file and llama-quantize took 12.7 min for 4 layers on the
loaded dev VM, so ~2.5 h for 48, and its 61 GB intermediate does not fit the disk).

Type map (llama.cpp src/llama-quant.cpp, llama_tensor_get_type_impl, ftype MOSTLY_Q4_K_M, expert
count 128, i.e. none of its 8-expert special cases): Q4_K by default; output.weight Q6_K; attn_v
and ffn_down_exps Q6_K in the layers where use_more_bits(i, n) holds (i < n/8, i >= 7n/8, or
(i - n/8) % 3 == 2: 24 of 48 layers), else Q4_K; ffn_gate_inp (the router) F32 as
convert_hf_to_gguf.py writes it and llama-quantize leaves it; norms F32. Metadata: the keys of
st_to_gguf.py's qwen3moe files (same synthetic byte-level BPE vocabulary), general.file_type 15
(MOSTLY_Q4_K_M), general.quantization_version 2.

Blocks (ggml-common.h), every field random but of a chosen scale, so the weights dequantize to
about the standard deviation 1/sqrt(in_features) of make_moe_model.py (activations stay O(1)):
  Q4_K (144 B / 256): d fp16, dmin fp16, scales[12] (6-bit scale and min per sub-block of 32,
       packed as get_scale_min_k4 reads them), qs[128] random nibbles. w = d sc q - dmin m.
       sc uniform in 32..63, dmin = 8 d, m = round(sc 7.5 / 8) so each sub-block is centred
       (q uniform 0..15 has mean 7.5, sd 4.61); d = sigma / (4.61 rms(sc)) times U(0.9, 1.1) per block.
  Q6_K (210 B / 256): ql[128], qh[64] random (q = 6 bits, w uses q - 32: sd 18.47), scales[16]
       int8 of magnitude 64..127 and random sign, d fp16 = sigma / (18.47 rms(|sc|)) times U(0.9, 1.1).
The router (F32) is uniform with sd router_scale / sqrt(hidden) (default 1: router logits of sd
~1 for an RMS-normed input, so tokens spread over the experts); norms are 1. Seeded (numpy PCG64):
a shape and seed give the same bytes.

usage: PYTHONPATH=<llama.cpp>/gguf-py make_moe_q4km_gguf.py OUT.gguf [--layers 48] [--vocab 151936]
       [--seed 1] [--router-scale 1]
Prints one JSON line: bytes, tensors, seconds, bytes of each ggml type.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_to_gguf import vocabulary  # noqa: E402  (the same synthetic vocabulary as the other MoE files)

Q = gguf.GGMLQuantizationType
QK_K = 256
Q4_K_BYTES, Q6_K_BYTES = 144, 210
Q4_Q_SD = float(np.sqrt((16 * 16 - 1) / 12))  # sd of q uniform on 0..15
Q6_Q_SD = float(np.sqrt((64 * 64 - 1) / 12))  # sd of q - 32, q uniform on 0..63


def rms(lo, hi):
    k = np.arange(lo, hi + 1, dtype=np.float64)
    return float(np.sqrt(np.mean(k * k)))


def fp16_bytes(x):
    return np.ascontiguousarray(x.astype(np.float16)).view(np.uint8).reshape(-1, 2)


def q4_k_blocks(rng, n_blocks, sigma):
    """n_blocks Q4_K super-blocks (uint8 [n_blocks, 144]) whose weights have sd ~sigma."""
    out = np.empty((n_blocks, Q4_K_BYTES), dtype=np.uint8)
    d = sigma / (Q4_Q_SD * rms(32, 63)) * rng.uniform(0.9, 1.1, n_blocks)
    out[:, 0:2] = fp16_bytes(d)
    out[:, 2:4] = fp16_bytes(8 * d)
    sc = rng.integers(32, 64, (n_blocks, 8), dtype=np.uint8)
    m = np.rint(sc.astype(np.float32) * (7.5 / 8)).astype(np.uint8)
    s = out[:, 4:16]
    # get_scale_min_k4: j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: sc = (s[j+4] & 15) |
    # (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4.
    s[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    out[:, 16:] = np.frombuffer(rng.bytes(n_blocks * 128), dtype=np.uint8).reshape(n_blocks, 128)
    return out


def q6_k_blocks(rng, n_blocks, sigma):
    """n_blocks Q6_K super-blocks (uint8 [n_blocks, 210]) whose weights have sd ~sigma."""
    out = np.empty((n_blocks, Q6_K_BYTES), dtype=np.uint8)
    out[:, 0:192] = np.frombuffer(rng.bytes(n_blocks * 192), dtype=np.uint8).reshape(n_blocks, 192)
    mag = rng.integers(64, 128, (n_blocks, 16), dtype=np.int16)
    sign = np.where(rng.integers(0, 2, (n_blocks, 16), dtype=np.int8) == 1, 1, -1).astype(np.int16)
    out[:, 192:208] = (mag * sign).astype(np.int8).view(np.uint8)
    d = sigma / (Q6_Q_SD * rms(64, 127)) * rng.uniform(0.9, 1.1, n_blocks)
    out[:, 208:210] = fp16_bytes(d)
    return out


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def plan(a):
    """[(name, numpy-order shape, type)] in llama-quantize's output order for the 4-layer file
    (output, output_norm, token_embd, then each layer's tensors by name)."""
    h, e, f, d = a.hidden, a.experts, a.expert_width, a.head_dim
    q, kv = a.heads * d, a.kv_heads * d
    out = [("output.weight", (a.vocab, h), Q.Q6_K), ("output_norm.weight", (h,), Q.F32),
           ("token_embd.weight", (a.vocab, h), Q.Q4_K)]
    for i in range(a.layers):
        more = Q.Q6_K if use_more_bits(i, a.layers) else Q.Q4_K
        layer = {"attn_k.weight": ((kv, h), Q.Q4_K), "attn_k_norm.weight": ((d,), Q.F32),
                 "attn_norm.weight": ((h,), Q.F32), "attn_output.weight": ((h, q), Q.Q4_K),
                 "attn_q.weight": ((q, h), Q.Q4_K), "attn_q_norm.weight": ((d,), Q.F32),
                 "attn_v.weight": ((kv, h), more), "ffn_down_exps.weight": ((e, h, f), more),
                 "ffn_gate_exps.weight": ((e, f, h), Q.Q4_K), "ffn_gate_inp.weight": ((e, h), Q.F32),
                 "ffn_norm.weight": ((h,), Q.F32), "ffn_up_exps.weight": ((e, f, h), Q.Q4_K)}
        out += [(f"blk.{i}.{n}", s, t) for n, (s, t) in sorted(layer.items())]
    return out


def nbytes(shape, t):
    n = int(np.prod(shape))
    if t == Q.F32:
        return 4 * n
    assert shape[-1] % QK_K == 0, f"row of {shape[-1]} elements is not a multiple of {QK_K}"
    return n // QK_K * (Q4_K_BYTES if t == Q.Q4_K else Q6_K_BYTES)


def data(rng, name, shape, t, a):
    if t != Q.F32:
        blocks = int(np.prod(shape)) // QK_K
        sigma = 1.0 / np.sqrt(shape[-1])
        return (q4_k_blocks if t == Q.Q4_K else q6_k_blocks)(rng, blocks, sigma).reshape(-1)
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    assert name.endswith("ffn_gate_inp.weight"), name
    bound = a.router_scale * np.sqrt(3.0 / shape[-1])
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--expert-width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--router-scale", type=float, default=1.0)
    a = ap.parse_args()
    t0 = time.time()
    tensors = plan(a)
    w = gguf.GGUFWriter(a.out, "qwen3moe")
    w.add_name(f"a3b-{a.layers}l-q4_k_m-random")
    w.add_context_length(40960)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(6144)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(a.head_dim)
    w.add_value_length(a.head_dim)
    w.add_rope_dimension_count(a.head_dim)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(a.vocab)
    w.add_expert_count(a.experts)
    w.add_expert_used_count(a.top_k)
    w.add_expert_feed_forward_length(a.expert_width)
    w.add_expert_weights_norm(True)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(2)
    tokens, merges, control = vocabulary(a.vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL for i in range(a.vocab)])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    for name, shape, t in tensors:
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes(shape, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(a.seed)
    by_type = {}
    for name, shape, t in tensors:
        arr = data(rng, name, shape, t, a)
        assert arr.nbytes == nbytes(shape, t), name
        w.write_tensor_data(arr)
        by_type[t.name] = by_type.get(t.name, 0) + arr.nbytes
    w.close()
    print(json.dumps({"out": a.out, "bytes": os.path.getsize(a.out), "tensors": len(tensors), "layers": a.layers,
                      "vocab": a.vocab, "seconds": round(time.time() - t0, 1), "bytes_by_type": by_type}))


if __name__ == "__main__":
    main()
