#!/usr/bin/env python3
"""/v1/embeddings goldens from sentence-transformers itself (issue 46, item 6).

Run on the GPU host (sentence-transformers 6 and torch are there, not on the dev machines):

    python3 tools/golden/make_embedding_golden.py --src tests/golden/qwen3-qknorm-f32 \
        --out tests/golden/embeddings/qwen3-qknorm-f32-st.json

For each pooling (last token, then mean), a temporary copy of --src (its files linked) gets the
sentence-transformers configuration a served folder would carry: modules.json (Transformer,
Pooling, Normalize), 1_Pooling/config.json naming that pooling, sentence_bert_config.json.
SentenceTransformer loads it on the CPU in float64 and encodes every text.

The JSON written:
  sentence_transformers, transformers, torch   versions
  modules, pooling_configs                     the configuration files written, so that a test can
                                               write the same ones
  cases: [{text, ids, lasttoken, mean}]        ids as sentence-transformers' tokenizer gives them
                                               (what a test sends as token-id input), and the
                                               normalised embeddings (float64) of each pooling
"""
import argparse
import json
import os
import tempfile

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

TEXTS = [
    "hello",
    "The quick brown fox jumps over the lazy dog.",
    "In the beginning God created the heaven and the earth.",
    "naïve café — 日本語のテキスト, emoji 🙂",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3,
]

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
]


def pooling_config(hidden, mode):
    return {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": mode == "lasttoken",
        "include_prompt": True,
    }


def st_folder(src, dst, config):
    for name in os.listdir(src):
        if name not in ("golden.json",):
            os.symlink(os.path.abspath(os.path.join(src, name)), os.path.join(dst, name))
    os.makedirs(os.path.join(dst, "1_Pooling"))
    os.makedirs(os.path.join(dst, "2_Normalize"))
    with open(os.path.join(dst, "modules.json"), "w") as f:
        json.dump(MODULES, f)
    with open(os.path.join(dst, "1_Pooling", "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(dst, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 512, "do_lower_case": False}, f)


def encode(src, config):
    with tempfile.TemporaryDirectory() as tmp:
        st_folder(src, tmp, config)
        model = SentenceTransformer(tmp, device="cpu").double()
        ids = [model.tokenize([t])["input_ids"][0].tolist() for t in TEXTS]
        with torch.no_grad():
            emb = model.encode(TEXTS, batch_size=1, convert_to_tensor=True)
        return ids, emb.double().tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="a causal-LM folder (config.json, model.safetensors, tokenizer)")
    ap.add_argument("--out", required=True, help="the golden JSON to write")
    args = ap.parse_args()
    hidden = json.load(open(os.path.join(args.src, "config.json")))["hidden_size"]
    configs = {mode: pooling_config(hidden, mode) for mode in ("lasttoken", "mean")}
    ids, last = encode(args.src, configs["lasttoken"])
    ids_mean, mean = encode(args.src, configs["mean"])
    assert ids == ids_mean, "the tokenizer gave different ids for the two poolings"
    golden = {
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "src": args.src,
        "modules": MODULES,
        "pooling_configs": configs,
        "cases": [{"text": t, "ids": i, "lasttoken": l, "mean": m} for t, i, l, m in zip(TEXTS, ids, last, mean)],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(golden, f, ensure_ascii=False)
    print(f"{args.out}: {len(TEXTS)} texts, dims {len(last[0])}, sentence-transformers {sentence_transformers.__version__}")


if __name__ == "__main__":
    main()
