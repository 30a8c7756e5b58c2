# Temporary differential check against HF tokenizers (not part of the suite).
import json, os, random, sys
import tokenizers
from tokenizers import Tokenizer
G = "tests/golden/tokenizers"
rng = random.Random(7)
ALPH = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + list("     \t\n\r.,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`") + \
  ["'s", "'T", "'ll", "'RE", "中", "文", "日本", "語", "한", "😀", "👍🏽", "🇫🇷", "\u200d", "e\u0301", "\u0301", "ß", "ﬁ", "Ä", "\u00a0", "\u3000", "\u2028", "\u0085",
   "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<s>", "</s>", "[INST]", "[/INST]", "▁", "  ", "\n\n", "123456", "\u0e01", "\u0915\u093f", "\U00010000", "\x00", "\x7f"]
def rand_text():
    n = rng.randint(0, 40)
    return "".join(rng.choice(ALPH) for _ in range(n))
texts = [rand_text() for _ in range(400)] + ["Hello world", "  x", " x", "x  ", "\n", "", "a'sB'LLc", "hello  world\n\n  foo"]
def variants():
    for name in ["bytelevel-llama3", "bytelevel-qwen2", "metaspace"]:
        j = json.load(open(f"{G}/{name}/tokenizer.json"))
        yield name, j
    j = json.load(open(f"{G}/metaspace/tokenizer.json"))
    j["normalizer"] = None
    for scheme in ["always", "first", "never"]:
        for split in [False, True]:
            j2 = json.loads(json.dumps(j))
            j2["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
            j2["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
            yield f"metaspace-{scheme}-{split}", j2
    j = json.load(open(f"{G}/bytelevel-qwen2/tokenizer.json"))
    j2 = json.loads(json.dumps(j)); j2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    yield "gpt2-regex", j2
    j2 = json.loads(json.dumps(j)); j2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    yield "gpt2-regex-prefix", j2
    j2 = json.loads(json.dumps(j)); j2["normalizer"] = {"type": "NFC"}
    yield "qwen2-nfc", j2
    j2 = json.loads(json.dumps(j))
    j2["added_tokens"][1]["lstrip"] = True; j2["added_tokens"][2]["rstrip"] = True
    yield "qwen2-strip", j2
out = {"version": tokenizers.__version__}
for name, j in variants():
    tok = Tokenizer.from_str(json.dumps(j))
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        cases.append({"text": t, "ids": ids, "ids_special": tok.encode(t).ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False), "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    out[name] = {"tokenizer_json": json.dumps(j), "cases": cases}
json.dump(out, open(os.path.join(os.environ["OUT"], "hf_diff.json"), "w"), ensure_ascii=False)
print("ok", tokenizers.__version__)
