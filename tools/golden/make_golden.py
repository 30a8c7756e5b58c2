#!/usr/bin/env python3
"""Builds Spindle's golden models and fixtures with an independent implementation.

Run on a host with torch, transformers and tokenizers (the H200 GPU host; a CPU works too):

    python3 tools/golden/make_golden.py --out tests/golden

It writes, under --out:
  tokenizers/{bytelevel,metaspace}/  two small tokenizers trained with HF tokenizers
  <model>/                            HF folders: config.json, model.safetensors, tokenizer.json,
                                      tokenizer_config.json, generation_config.json
  <model>/golden.json                 HF transformers' last-position logits and 32-token greedy
                                      continuations for a few prompts (float32 compute on the
                                      stored weights, so bf16 models mean "bf16 weights, f32
                                      activations", as Spindle computes)
  tokenizers/<name>/golden.json       token ids of hard strings, and decode(ids)
  chat_templates.json                 apply_chat_template renderings per template

Models (random weights, scaled so greedy decisions have clear margins):
  llama-gqa      LlamaForCausalLM, llama3 rope scaling, 4 heads over 1 KV head, byte-level BPE
  qwen2-tied     Qwen2ForCausalLM, q/k/v bias, tied embeddings, ChatML
  qwen3-qknorm   Qwen3ForCausalLM, q/k RMSNorm, ChatML
  mistral        MistralForCausalLM, Metaspace BPE with byte fallback, [INST] template
each as -f32 and -bf16.
"""
import argparse
import inspect
import json
import os
import random

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

VOCAB = 1024
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

HARD_STRINGS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\r\n\n\nend",
    "numbers 1234567890 3.14159 -42 1e-9",
    "emoji 😀👍🏽 🇫🇷 family 👨‍👩‍👧‍👦",
    "CJK 中文字符测试 日本語のテキスト 한국어",
    "combining e\u0301 a\u0300 n\u0303 Zalgo Z\u0337\u0322a\u0335l\u0334g\u0338o",
    "def f(x):\n    return x ** 2  # square\n\tif x: pass",
    "URL https://example.com/path?q=1&r=2#frag",
    "can't won't I'm they're we've you'll he'd",
    "MiXeD CaSe ÀÉÎÕÜ ß ﬁ",
    "                    ",
    "a",
    "",
    "Ünïcödé ∑∫√∞≈≠ ← → ↑ ↓",
    "<|im_start|>user\nhi<|im_end|>",
    "[INST] hello [/INST]",
    "<s> not special in text </s>",
]

EXTRA_CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "In the beginning God created the heaven and the earth.",
    "中文字符测试 日本語のテキスト 한국어 텍스트 😀 👍 🇫🇷",
    "numbers 0123456789 3.14159 2718281828 100000 42 7",
    "def main():\n    print('hello')\n    return 0\n",
]


def corpus_lines():
    import argparse as a, collections, json as j, re, string, textwrap, typing, pathlib, dataclasses, functools
    text = []
    for mod in (a, collections, j, re, string, textwrap, typing, pathlib, dataclasses, functools, inspect, random):
        try:
            text.extend(inspect.getsource(mod).splitlines())
        except (OSError, TypeError):
            pass
    text.extend(EXTRA_CORPUS * 50)
    return text


def train_bytelevel(split_regex, specials, bos):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_metaspace():
    specials = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Train with a Metaspace split so merges never cross a word start; serve with the
    # normalizer form Mistral v0.3 and Llama-2 ship (Prepend + Replace, no pre-tokenizer).
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=specials + byte_tokens, show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content']"
    " + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}")

FAMILIES = {
    "llama": dict(tokenizer="bytelevel-llama3", template=LLAMA3_TEMPLATE, bos="<|begin_of_text|>",
                  eos="<|eot_id|>"),
    "qwen": dict(tokenizer="bytelevel-qwen2", template=CHATML_TEMPLATE, bos=None, eos="<|im_end|>"),
    "mistral": dict(tokenizer="metaspace", template=MISTRAL_TEMPLATE, bos="<s>", eos="</s>"),
}


def make_tokenizers():
    return {
        "bytelevel-llama3": train_bytelevel(
            LLAMA3_SPLIT, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|eot_id|>"], "<|begin_of_text|>"),
        "bytelevel-qwen2": train_bytelevel(QWEN2_SPLIT, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None),
        "metaspace": train_metaspace(),
    }


def fast_tokenizer(tok, family):
    f = FAMILIES[family]
    kwargs = dict(tokenizer_object=tok, eos_token=f["eos"], chat_template=f["template"])
    if f["bos"]:
        kwargs["bos_token"] = f["bos"]
    if family == "mistral":
        kwargs["unk_token"] = "<unk>"
    if family == "qwen":
        kwargs["pad_token"] = "<|endoftext|>"
    return PreTrainedTokenizerFast(**kwargs)


def model_specs(tokenizers):
    common = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  max_position_embeddings=256, rms_norm_eps=1e-5)
    tl = tokenizers["bytelevel-llama3"]
    tq = tokenizers["bytelevel-qwen2"]
    tm = tokenizers["metaspace"]
    return {
        "llama-gqa": ("llama", LlamaForCausalLM, LlamaConfig(
            **common, num_attention_heads=4, num_key_value_heads=1, head_dim=64, rope_theta=500000.0,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64},
            tie_word_embeddings=False, bos_token_id=tl.token_to_id("<|begin_of_text|>"),
            eos_token_id=tl.token_to_id("<|eot_id|>"))),
        "qwen2-tied": ("qwen", Qwen2ForCausalLM, Qwen2Config(
            **common, num_attention_heads=2, num_key_value_heads=1, rope_theta=1000000.0, tie_word_embeddings=True,
            use_sliding_window=False, bos_token_id=tq.token_to_id("<|endoftext|>"),
            eos_token_id=tq.token_to_id("<|im_end|>"))),
        "qwen3-qknorm": ("qwen", Qwen3ForCausalLM, Qwen3Config(
            **common, num_attention_heads=4, num_key_value_heads=2, head_dim=64, rope_theta=1000000.0,
            tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
            bos_token_id=tq.token_to_id("<|endoftext|>"), eos_token_id=tq.token_to_id("<|im_end|>"))),
        "mistral": ("mistral", MistralForCausalLM, MistralConfig(
            **common, num_attention_heads=4, num_key_value_heads=2, head_dim=64, rope_theta=1000000.0,
            sliding_window=None, tie_word_embeddings=False, bos_token_id=tm.token_to_id("<s>"),
            eos_token_id=tm.token_to_id("</s>"))),
    }


PROMPTS = [
    "The quick brown fox",
    "In the beginning",
    "def main():\n    print(",
    "中文 and emoji 😀 mixed",
]


def scale_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))


@torch.no_grad()
def greedy(model, ids, steps):
    seq = list(ids)
    margins = []
    for _ in range(steps):
        logits = model(torch.tensor([seq])).logits[0, -1].double()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return seq[len(ids):], min(margins)


@torch.no_grad()
def record_model(model_f32, tok, prompts):
    out = []
    min_margin = float("inf")
    for text in prompts:
        ids = tok(text)["input_ids"]
        logits = model_f32(torch.tensor([ids])).logits[0, -1]
        cont, margin = greedy(model_f32, ids, 32)
        min_margin = min(min_margin, margin)
        out.append({"text": text, "ids": ids, "last_logits": [float(x) for x in logits], "greedy": cont,
                    "greedy_min_margin": margin})
    return out, min_margin


def save_model(out_dir, name, family, cls, config, tok_obj, seed, dtype):
    torch.manual_seed(seed)
    model = cls(config).eval()
    scale_weights(model, seed)
    model = model.to(dtype)
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    fast = fast_tokenizer(tok_obj, family)
    fast.save_pretrained(path)
    # The reference: the stored weights, f32 compute.
    ref = cls.from_pretrained(path, torch_dtype=torch.float32).eval()
    return ref, fast


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--min-margin", type=float, default=0.05)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    tokenizers = make_tokenizers()
    info = {"transformers": transformers.__version__, "torch": torch.__version__, "models": {}}

    for tname, tok in tokenizers.items():
        tdir = os.path.join(args.out, "tokenizers", tname)
        os.makedirs(tdir, exist_ok=True)
        tok.save(os.path.join(tdir, "tokenizer.json"))
        cases = []
        for s in HARD_STRINGS:
            enc = tok.encode(s, add_special_tokens=False)
            with_special = tok.encode(s, add_special_tokens=True)
            cases.append({"text": s, "ids": enc.ids, "ids_with_special": with_special.ids,
                          "decoded": tok.decode(enc.ids, skip_special_tokens=False)})
        with open(os.path.join(tdir, "golden.json"), "w") as f:
            json.dump({"strings": cases}, f, ensure_ascii=False, indent=1)

    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Count to 3"}]
    chat = {}
    for family, f in FAMILIES.items():
        fast = fast_tokenizer(tokenizers[f["tokenizer"]], family)
        msgs = messages if family != "mistral" else messages[1:]
        chat[family] = {"messages": msgs,
                        "rendered": fast.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                        "template": f["template"]}
    with open(os.path.join(args.out, "chat_templates.json"), "w") as fh:
        json.dump(chat, fh, ensure_ascii=False, indent=1)

    for name, (family, cls, config) in model_specs(tokenizers).items():
        tok_obj = tokenizers[FAMILIES[family]["tokenizer"]]
        for suffix, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            full = f"{name}-{suffix}"
            for attempt in range(20):
                seed = 1000 + attempt
                ref, fast = save_model(args.out, full, family, cls, config, tok_obj, seed, dtype)
                records, margin = record_model(ref, fast, PROMPTS)
                if margin >= args.min_margin:
                    break
                print(f"{full}: seed {seed} min greedy margin {margin:.4f} too small; retrying")
            with open(os.path.join(args.out, full, "golden.json"), "w") as fh:
                json.dump({"model": full, "dtype": suffix, "seed": seed, "compute": "float32",
                           "prompts": records}, fh, ensure_ascii=False)
            info["models"][full] = {"seed": seed, "min_greedy_margin": margin}
            print(f"{full}: seed {seed}, min greedy margin {margin:.4f}")
    with open(os.path.join(args.out, "MANIFEST.json"), "w") as fh:
        json.dump(info, fh, indent=1)


if __name__ == "__main__":
    main()
