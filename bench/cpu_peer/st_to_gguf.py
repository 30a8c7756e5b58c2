#!/usr/bin/env python3
"""A Llama, Mixtral, Qwen2-MoE or Qwen3-MoE checkpoint folder (config.json + one model.safetensors,
bf16) -> a bf16 GGUF file, for the llama.cpp comparisons in bench/results/2026-12-01-cpu-vs-llamacpp.md
and bench/results/2026-12-07-devvm-moe-gguf-llamacpp. Also writes the folder's
tokenizer.json (--write-tokenizer) and puts the same vocabulary into the GGUF, so both engines read
one model with one vocabulary.

Weights are copied bit for bit: bf16 stays bf16 (never widened or rounded); the 1-D norm weights go
to F32, as llama.cpp's own converter stores them (bf16 -> f32 is exact). The only change is the row
order of q_proj and k_proj: Hugging Face's rotary embedding rotates the two halves of a head
(rotate_half: pairs (i, i + d/2)), GGML's Llama rope rotates adjacent pairs (2i, 2i + 1), so each
head's rows are reordered from [half 0 | half 1] to interleaved. Llama-3 rope scaling becomes the
`rope_freqs` factor tensor (one factor per rotary frequency), which is how GGUF carries it.

Needs numpy and the `gguf` package from llama.cpp's tree (PYTHONPATH=<llama.cpp>/gguf-py); not
torch, not safetensors (the format is read here: 8-byte little-endian header length, JSON header,
raw tensor data).

Mixtures of experts (issue 48), laid out as llama.cpp's convert_hf_to_gguf.py does: general.architecture
"llama" with {arch}.expert_count / expert_used_count for Mixtral, "qwen3moe" / "qwen2moe" with
expert_feed_forward_length, expert_shared_feed_forward_length (qwen2moe) and expert_weights_norm
(norm_topk_prob); per sparse layer the router ffn_gate_inp (bf16), each projection's experts stacked
in expert order into one 3-D tensor ffn_{gate,up,down}_exps ([E, F, H] / [E, H, F], bf16),
qwen2moe's shared expert ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp (F32 [H]); Qwen's
q/k/v biases (qwen2moe) and q/k norms (qwen3moe) as F32. A dense layer of mlp_only_layers keeps
ffn_gate/up/down (llama.cpp itself cannot load such a file; Spindle can).

The vocabulary (byte-level BPE, exactly vocab_size ids): 0 <|begin_of_text|> and 1 <|end_of_text|>
(control tokens; make_bench_model's config says bos 0, eos 1), 2..129 the byte symbols of the 128
ASCII bytes (GPT-2's byte-to-unicode table), 130..257 fillers "x<b>" (see vocabulary()), then a few merged tokens (space + letter, a few letter pairs) with their
merges, then filler tokens "w<i>" up to vocab_size (plain ASCII, never produced by the merges, but
every id decodes to text). Pre-tokenizer: GPT-2's regex on both sides (ByteLevel use_regex in
tokenizer.json, "gpt-2" in GGUF). No BOS is added by either tokenizer.

With --own-tokenizer PRE the folder's own tokenizer.json (a byte-level BPE: vocab, merges, added
tokens; e.g. models/kjv-tiny) goes into the GGUF instead, with tokenizer.ggml.pre = PRE (the
llama.cpp name of its split regex, e.g. llama-bpe), special added tokens as CONTROL, the eos list's
first id as eos and its others as eot, and the chat template of tokenizer_config.json or
chat_template.jinja.

usage: PYTHONPATH=.../gguf-py python3 st_to_gguf.py MODEL_DIR OUT.gguf [--write-tokenizer] [--verify]
       [--no-rope-permute] [--own-tokenizer PRE]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

import gguf


def read_safetensors(path):
    """name -> (dtype string, shape, numpy memmap of the raw data as uint16 / float32 / ...)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    base = 8 + n
    np_types = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        arr = raw[base + begin: base + end].view(np_types[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], info["shape"], arr)
    return out


def byte_symbols():
    """GPT-2's byte-to-unicode table: the symbol of byte b is byte_symbols()[b]."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return [chr(table[b]) for b in range(256)]


def vocabulary(vocab_size):
    """(tokens in id order, merges as 'a b' strings, ids of the control tokens)."""
    sym = byte_symbols()
    # Only ASCII bytes get their byte symbol; the slots of bytes 0x80-0xff hold plain fillers, so
    # every id decodes to valid UTF-8 on its own. (llama-server answers 500 "The model produced
    # output that does not match the expected Content-only format" when a completion's text is a
    # lone non-ASCII byte, which a random model emits often; prompts here are token ids, so no
    # text ever needs those bytes.)
    tokens = ["<|begin_of_text|>", "<|end_of_text|>"] + sym[:128] + [f"x{b}" for b in range(128, 256)]
    space = sym[ord(" ")]
    merges = []
    for c in "abcdefghijklmnopqrstuvwxyz":
        merges.append((space, c))
    for pair in ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd"]:
        merges.append((pair[0], pair[1]))
    for a, b in merges:
        tokens.append(a + b)
    i = 0
    while len(tokens) < vocab_size:
        tokens.append(f"w{i}")
        i += 1
    assert len(tokens) == vocab_size and len(set(tokens)) == vocab_size
    return tokens, [f"{a} {b}" for a, b in merges], [0, 1]


def tokenizer_json(tokens, merges, control):
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in control]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def own_vocabulary(model_dir, vocab_size):
    """(tokens in id order, merges as 'a b' strings, ids of the control tokens, chat template or None)
    from MODEL_DIR/tokenizer.json (a byte-level BPE)."""
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tj = json.load(f)
    model = tj["model"]
    assert model["type"] == "BPE", f"tokenizer.json model {model['type']}: only BPE"
    tokens = [None] * vocab_size
    for text, i in list(model["vocab"].items()) + [(a["content"], a["id"]) for a in tj.get("added_tokens", [])]:
        assert 0 <= i < vocab_size, f"token {text!r} id {i} outside vocab_size {vocab_size}"
        tokens[i] = text
    missing = [i for i, t in enumerate(tokens) if t is None]
    assert not missing, f"ids without a token: {missing[:10]}"
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    control = [a["id"] for a in tj.get("added_tokens", []) if a.get("special")]
    template = None
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            template = json.load(f).get("chat_template")
    jinja = os.path.join(model_dir, "chat_template.jinja")
    if template is None and os.path.exists(jinja):
        with open(jinja) as f:
            template = f.read()
    return tokens, merges, control, template


def interleave_rope_rows(w, n_head):
    """HF rows per head [x_0..x_{d/2-1} | y_0..y_{d/2-1}] -> GGML's [x_0, y_0, x_1, y_1, ...]."""
    out_dim = w.shape[0]
    d = out_dim // n_head
    return np.ascontiguousarray(w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(rope_theta, head_dim, scaling):
    """Per rotary frequency, the divisor Llama-3 rope scaling applies (1 for short wavelengths,
    `factor` for long ones, a smooth blend between)."""
    factor = scaling.get("factor", 8.0)
    low = scaling.get("low_freq_factor", 1.0)
    high = scaling.get("high_freq_factor", 4.0)
    old_ctx = scaling.get("original_max_position_embeddings", 8192)
    factors = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / (rope_theta ** (i / head_dim))
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def deinterleave_rope_rows(w, n_head):
    d = w.shape[0] // n_head
    return np.ascontiguousarray(w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


ARCHS = {"llama": "llama", "mixtral": "llama", "qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe"}


def num_experts(cfg):
    return cfg.get("num_experts") or cfg.get("num_local_experts") or 0


def is_sparse(cfg, layer):
    if num_experts(cfg) == 0 or layer in (cfg.get("mlp_only_layers") or []):
        return False
    return (layer + 1) % (cfg.get("decoder_sparse_step") or 1) == 0


def plan(cfg, tensors):
    """[(GGUF name, [HF names], kind, permute heads or None)] in write order; kind: "vector" (F32),
    "matrix" (bf16 as stored), "experts" (the HF matrices stacked, bf16) or "row" (a [1, H] matrix
    written as F32 [H])."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    llama = ARCHS[cfg["model_type"]] == "llama"
    out = []

    def add(gguf_name, hf, kind="matrix", permute=None):
        if isinstance(hf, str):
            hf = [hf]
        if all(h in tensors for h in hf):
            out.append((gguf_name, hf, "vector" if kind == "matrix" and len(tensors[hf[0]][1]) == 1 else kind,
                        permute if llama else None))

    add("token_embd.weight", "model.embed_tokens.weight")
    add("output_norm.weight", "model.norm.weight")
    if not cfg.get("tie_word_embeddings", False):
        add("output.weight", "lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        add(g + "attn_norm.weight", p + "input_layernorm.weight")
        for x, n in (("q", heads), ("k", kv_heads), ("v", None)):
            add(g + f"attn_{x}.weight", p + f"self_attn.{x}_proj.weight", permute=n)
            add(g + f"attn_{x}.bias", p + f"self_attn.{x}_proj.bias", permute=n)
        add(g + "attn_q_norm.weight", p + "self_attn.q_norm.weight")
        add(g + "attn_k_norm.weight", p + "self_attn.k_norm.weight")
        add(g + "attn_output.weight", p + "self_attn.o_proj.weight")
        add(g + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        if not is_sparse(cfg, i):
            for x in ("gate", "up", "down"):
                add(g + f"ffn_{x}.weight", p + f"mlp.{x}_proj.weight")
            continue
        mixtral = cfg["model_type"] == "mixtral"
        m = p + ("block_sparse_moe." if mixtral else "mlp.")
        add(g + "ffn_gate_inp.weight", m + "gate.weight")
        for x, w in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
            proj = w if mixtral else f"{x}_proj"
            add(g + f"ffn_{x}_exps.weight", [f"{m}experts.{e}.{proj}.weight" for e in range(num_experts(cfg))],
                "experts")
        for x in ("gate", "up", "down"):
            add(g + f"ffn_{x}_shexp.weight", p + f"mlp.shared_expert.{x}_proj.weight")
        add(g + "ffn_gate_inp_shexp.weight", p + "mlp.shared_expert_gate.weight", "row")
    return out


def bf16_to_f32(dtype, arr):
    return (arr.astype(np.uint32) << 16).view(np.float32) if dtype == "BF16" else arr.astype(np.float32)


def verify(model_dir, path):
    """Every GGUF tensor equals its safetensors tensor(s) bit for bit (after undoing the q/k row
    order; an expert stack: each expert's slice), and every safetensors tensor is in the file."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    by_name = {t.name: t for t in gguf.GGUFReader(path).tensors}
    covered = set()
    for gguf_name, hf_names, kind, permute in plan(cfg, tensors):
        t = by_name.pop(gguf_name)
        raw = np.ascontiguousarray(t.data).reshape(-1)
        for e, hf in enumerate(hf_names):
            dtype, shape, ref = tensors[hf]
            if kind in ("vector", "row"):
                assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
                ok = np.array_equal(raw.view(np.uint32), bf16_to_f32(dtype, ref).reshape(-1).view(np.uint32))
            else:
                assert t.tensor_type == gguf.GGMLQuantizationType.BF16, t.name
                data = raw.view(np.uint16).reshape(len(hf_names), *shape)[e]
                if permute is not None:
                    data = deinterleave_rope_rows(data, permute)
                ok = np.array_equal(data, ref)
            assert ok, f"{t.name} differs from {hf}"
            covered.add(hf)
    by_name.pop("rope_freqs.weight", None)
    assert not by_name, f"tensors not from the checkpoint: {sorted(by_name)}"
    missing = set(tensors) - covered - ({"lm_head.weight"} if cfg.get("tie_word_embeddings") else set())
    assert not missing, f"checkpoint tensors not in the file: {sorted(missing)[:5]}"
    print(json.dumps({"verified": path, "tensors_identical": len(covered)}))


def write_moe_keys(w, cfg):
    experts = num_experts(cfg)
    if experts == 0:
        return
    w.add_expert_count(experts)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if cfg["model_type"] == "mixtral":
        return  # experts of width feed_forward_length, top-k weights renormalized
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if cfg["model_type"] == "qwen2_moe":
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
    w.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", False)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--write-tokenizer", action="store_true", help="also write MODEL_DIR/tokenizer.json")
    ap.add_argument("--verify", action="store_true",
                    help="write nothing: read OUT.gguf back and check every tensor against the safetensors bit for bit")
    ap.add_argument("--own-tokenizer", metavar="PRE",
                    help="use MODEL_DIR/tokenizer.json (byte-level BPE) with tokenizer.ggml.pre = PRE")
    ap.add_argument("--no-rope-permute", action="store_true",
                    help="negative control only: keep HF's q/k row order (a wrong GGUF; check_logits.py must fail)")
    args = ap.parse_args()
    if args.verify:
        return verify(args.model_dir, args.out)

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg.get("model_type") in ARCHS, f"model_type {cfg.get('model_type')}: only {sorted(ARCHS)}"
    if cfg["model_type"] == "qwen2_moe":
        assert cfg.get("qkv_bias", True), "qwen2_moe without qkv_bias"
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    h, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or h // heads
    layers, vocab_size = cfg["num_hidden_layers"], cfg["vocab_size"]
    tensors = read_safetensors(os.path.join(args.model_dir, "model.safetensors"))

    template = None
    if args.own_tokenizer:
        tokens, merges, control, template = own_vocabulary(args.model_dir, vocab_size)
    else:
        tokens, merges, control = vocabulary(vocab_size)
    if args.write_tokenizer:
        assert not args.own_tokenizer, "--write-tokenizer writes the synthetic vocabulary only"
        with open(os.path.join(args.model_dir, "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json(tokens, merges, control), f)
        with open(os.path.join(args.model_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": tokens[0], "eos_token": tokens[1], "add_bos_token": False,
                       "tokenizer_class": "PreTrainedTokenizerFast"}, f)

    w = gguf.GGUFWriter(args.out, ARCHS[cfg["model_type"]])
    w.add_name(os.path.basename(os.path.normpath(args.model_dir)))
    w.add_context_length(cfg.get("max_position_embeddings", 8192))
    w.add_embedding_length(h)
    w.add_block_count(layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    rope = cfg.get("rope_parameters") or {}  # newer Hugging Face configs keep rope_theta here
    rope_theta = float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0)))
    w.add_rope_freq_base(rope_theta)
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(vocab_size)
    write_moe_keys(w, cfg)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(args.own_tokenizer or "gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL
                       for i in range(vocab_size)])
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg.get("bos_token_id", 0))
    eos = cfg.get("eos_token_id", 1)
    eos = eos if isinstance(eos, list) else [eos]
    w.add_eos_token_id(eos[0])
    if len(eos) > 1:
        w.add_eot_token_id(eos[1])
    if template:
        w.add_chat_template(template)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    scaling = cfg.get("rope_scaling") or {k: v for k, v in rope.items() if k != "rope_theta"}
    kind = scaling.get("rope_type", scaling.get("type", ""))
    if kind == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(rope_theta, head_dim, scaling))
    elif scaling and kind != "default":
        sys.exit(f"rope_scaling {scaling} not handled")

    planned = plan(cfg, tensors)
    for gguf_name, hf_names, kind, permute in planned:
        dtype, shape, arr = tensors[hf_names[0]]
        if kind in ("vector", "row"):  # norms, biases, the shared expert gate: f32, as llama.cpp stores them
            w.add_tensor(gguf_name, np.ascontiguousarray(bf16_to_f32(dtype, arr).reshape(-1)))
            continue
        assert dtype == "BF16", f"{hf_names[0]}: {dtype}, expected BF16"
        if kind == "experts":
            arr = np.stack([tensors[h][2] for h in hf_names])
        elif permute is not None and not args.no_rope_permute:
            arr = interleave_rope_rows(arr, permute)
        w.add_tensor(gguf_name, np.ascontiguousarray(arr), raw_shape=arr.shape,
                     raw_dtype=gguf.GGMLQuantizationType.BF16)
    written = {h for _, hf_names, _, _ in planned for h in hf_names}
    unused = set(tensors) - written - {"lm_head.weight"}
    assert not unused, f"tensors not converted: {sorted(unused)[:5]}"

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(json.dumps({"out": args.out, "bytes": os.path.getsize(args.out), "tensors": len(planned),
                      "vocab": vocab_size, "head_dim": head_dim}))


if __name__ == "__main__":
    main()
