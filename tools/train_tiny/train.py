#!/usr/bin/env python3
"""Train Spindle's embedded default models (models/kjv-tiny, models/kjv-draft) on the King James Bible.

Input: the verse-per-line dump written by tools/train_tiny/dump_kjv.sh ("Ge1:1 In the beginning ...").
Output (under --out):
  models/kjv-tiny/    LlamaForCausalLM, 8 layers, hidden 384, 6 heads over 2 KV heads (head_dim 64), bf16
  models/kjv-draft/   the same shape with 2 layers and a narrower MLP, distilled from kjv-tiny (speculative draft)
  tests/golden/kjv-tiny/golden.json   HF float32 last-position logits and 32-token greedy runs of kjv-tiny
  metrics.json        losses, parameter counts, settings
Both models share one byte-level BPE tokenizer (vocab 4096) with <|endoftext|> (id 0, also BOS), <|im_start|>,
<|im_end|> and a ChatML chat template.

Data: verses in order, one per line ("text\\n"); blocks of 64 consecutive verses, every 20th block (block % 20 == 10)
is held out for validation (~5%). Each training row is BOS + 512 tokens starting at a verse start; 15% of rows are
ChatML conversations "user: <Book c:v>" -> "assistant: <verse>" (half with a leading BOS, half without) so that
chat prompts end with <|im_end|>. Loss is computed on every target token.

Needs torch, tokenizers, transformers (5.x); runs on one CUDA GPU. Each training run is time-bounded (the cosine
schedule runs on max(step/steps, elapsed/budget)), so the whole script ends in about --budget seconds.
"""
import argparse
import json
import math
import os
import re
import time

import torch
import torch.nn.functional as F
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

T0 = time.time()


def log(*args):
    print(f"[{time.time() - T0:7.1f}s]", *args, flush=True)


BOOKS = {
    "Ge": "Genesis", "Exo": "Exodus", "Lev": "Leviticus", "Num": "Numbers", "Deu": "Deuteronomy",
    "Josh": "Joshua", "Jdgs": "Judges", "Ruth": "Ruth", "1Sm": "1 Samuel", "2Sm": "2 Samuel", "1Ki": "1 Kings",
    "2Ki": "2 Kings", "1Chr": "1 Chronicles", "2Chr": "2 Chronicles", "Ezra": "Ezra", "Neh": "Nehemiah",
    "Est": "Esther", "Job": "Job", "Psa": "Psalms", "Prv": "Proverbs", "Eccl": "Ecclesiastes",
    "SSol": "Song of Solomon", "Isa": "Isaiah", "Jer": "Jeremiah", "Lam": "Lamentations", "Eze": "Ezekiel",
    "Dan": "Daniel", "Hos": "Hosea", "Joel": "Joel", "Amos": "Amos", "Obad": "Obadiah", "Jonah": "Jonah",
    "Mic": "Micah", "Nahum": "Nahum", "Hab": "Habakkuk", "Zep": "Zephaniah", "Hag": "Haggai", "Zec": "Zechariah",
    "Mal": "Malachi", "Mat": "Matthew", "Mark": "Mark", "Luke": "Luke", "John": "John", "Acts": "Acts",
    "Rom": "Romans", "1Cor": "1 Corinthians", "2Cor": "2 Corinthians", "Gal": "Galatians", "Eph": "Ephesians",
    "Phi": "Philippians", "Col": "Colossians", "1Th": "1 Thessalonians", "2Th": "2 Thessalonians",
    "1Tim": "1 Timothy", "2Tim": "2 Timothy", "Titus": "Titus", "Phmn": "Philemon", "Heb": "Hebrews",
    "Jas": "James", "1Pet": "1 Peter", "2Pet": "2 Peter", "1Jn": "1 John", "2Jn": "2 John", "3Jn": "3 John",
    "Jude": "Jude", "Rev": "Revelation",
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOS, IM_START, IM_END = 0, 1, 2
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
GOLDEN_PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "Jesus wept"]
SAMPLE_PROMPTS = ["And God said", "The LORD is my shepherd", "Blessed are the", "And it came to pass",
                  "For God so loved the world"]
CTX = 512


# ----------------------------------------------------------------------------------------------------------- data
def read_corpus(path):
    pat = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
    verses = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            m = pat.match(line)
            if not m or m[1] not in BOOKS:
                raise SystemExit(f"{path}:{n}: not a verse line: {line[:80]!r}")
            verses.append((f"{BOOKS[m[1]]} {int(m[2])}:{int(m[3])}", " ".join(m[4].split())))
    return verses


def is_val(i):
    return (i // 64) % 20 == 10


def conversation(ref, text):
    return f"<|im_start|>user\n{ref}<|im_end|>\n<|im_start|>assistant\n{text}<|im_end|>\n"


def train_tokenizer(train_verses, vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    texts = [t + "\n" for _, t in train_verses] + [f"user\n{r}\nassistant\n" for r, _ in train_verses[::8]]
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", pair="<|endoftext|> $A <|endoftext|> $B",
        special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))])
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def stream(id_lists):
    flat, starts = [], []
    for ids in id_lists:
        starts.append(len(flat))
        flat.extend(ids)
    return torch.tensor(flat, dtype=torch.long), torch.tensor(starts, dtype=torch.long)


def eval_windows(blocks, limit=None):
    """Each block (list of verse id lists) -> BOS + 512-token chunks; labels padded with -100."""
    xs, ys = [], []
    for block in blocks:
        ids = [t for v in block for t in v]
        for s in range(0, len(ids), CTX):
            x = [BOS] + ids[s:s + CTX]
            inp, lab = x[:-1], x[1:]
            pad = CTX - len(inp)
            xs.append(inp + [BOS] * pad)
            ys.append(lab + [-100] * pad)
    if limit:
        xs, ys = xs[:limit], ys[:limit]
    return torch.tensor(xs), torch.tensor(ys)


class Data:
    def __init__(self, tok, verses, dev):
        ids = [e.ids for e in tok.encode_batch([t + "\n" for _, t in verses], add_special_tokens=False)]
        self.n_bytes = [len((t + "\n").encode()) for _, t in verses]
        train_idx = [i for i in range(len(verses)) if not is_val(i)]
        val_idx = [i for i in range(len(verses)) if is_val(i)]
        self.train_tokens = sum(len(ids[i]) for i in train_idx)
        self.val_tokens = sum(len(ids[i]) for i in val_idx)
        self.val_bytes = sum(self.n_bytes[i] for i in val_idx)
        flat, starts = stream([ids[i] for i in train_idx])
        self.flat = flat.to(dev)
        self.starts = starts[starts + CTX + 1 <= len(flat)].to(dev)
        convs = tok.encode_batch([conversation(*verses[i]) for i in train_idx], add_special_tokens=False)
        cflat, cstarts = stream([e.ids for e in convs])
        self.cflat = cflat.to(dev)
        self.cstarts = cstarts[cstarts + CTX + 1 <= len(cflat)].to(dev)
        self.chat_tokens = len(cflat)
        # Validation and a train subset of the same shape, both plain text in 64-verse blocks.
        val_blocks, train_blocks = {}, {}
        for i in range(len(verses)):
            (val_blocks if is_val(i) else train_blocks).setdefault(i // 64, []).append(ids[i])
        self.val = [t.to(dev) for t in eval_windows(list(val_blocks.values()))]
        self.train_eval = [t.to(dev) for t in eval_windows(list(train_blocks.values())[::20])]
        self.ar = torch.arange(CTX + 1, device=dev)
        self.dev = dev

    def batch(self, n, chat_frac=0.15):
        n_chat = int(round(n * chat_frac))
        n_chat_bos = n_chat // 2
        n_plain = n - n_chat
        rows = []
        s = self.starts[torch.randint(len(self.starts), (n_plain,), device=self.dev)]
        rows.append(torch.cat([torch.full((n_plain, 1), BOS, device=self.dev),
                               self.flat[s[:, None] + self.ar[:CTX]]], 1))
        if n_chat_bos:
            s = self.cstarts[torch.randint(len(self.cstarts), (n_chat_bos,), device=self.dev)]
            rows.append(torch.cat([torch.full((n_chat_bos, 1), BOS, device=self.dev),
                                   self.cflat[s[:, None] + self.ar[:CTX]]], 1))
        if n_chat - n_chat_bos:
            s = self.cstarts[torch.randint(len(self.cstarts), (n_chat - n_chat_bos,), device=self.dev)]
            rows.append(self.cflat[s[:, None] + self.ar])
        x = torch.cat(rows, 0)
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()


# ---------------------------------------------------------------------------------------------------------- model
def make_config(vocab, layers, inter):
    return LlamaConfig(
        vocab_size=vocab, hidden_size=384, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=CTX,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        attention_dropout=0.0, bos_token_id=BOS, eos_token_id=[BOS, IM_END], pad_token_id=BOS,
        initializer_range=0.02)


def add_dropout(model, p):
    """Residual-branch dropout (Llama has none of its own) as forward hooks; active only in train mode."""
    def hook(m, inp, out):
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, m.training),) + tuple(out[1:])
        return F.dropout(out, p, m.training)
    handles = []
    if p > 0:
        for layer in model.model.layers:
            handles.append(layer.self_attn.register_forward_hook(hook))
            handles.append(layer.mlp.register_forward_hook(hook))
    return handles


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def logits_of(model, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(input_ids=x, use_cache=False).logits


@torch.no_grad()
def evaluate(model, windows, teacher=None, bs=64):
    was = model.training
    model.eval()
    xs, ys = windows
    tot, cnt, agree = 0.0, 0, 0
    for i in range(0, len(xs), bs):
        x, y = xs[i:i + bs], ys[i:i + bs]
        lg = logits_of(model, x).float()
        tot += float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1), ignore_index=-100,
                                     reduction="sum"))
        m = y != -100
        cnt += int(m.sum())
        if teacher is not None:
            tl = logits_of(teacher, x).float()
            agree += int(((lg.argmax(-1) == tl.argmax(-1)) & m).sum())
    model.train(was)
    return tot / cnt, (agree / cnt if teacher is not None else None)


def train(name, cfg, data, *, steps, budget_s, lr, dropout, batch, wd=0.1, warmup=100, eval_every=100,
          teacher=None, distill=0.5, seed=0):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).cuda()
    model.train()
    handles = add_dropout(model, dropout)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    log(f"{name}: {n_params(model) / 1e6:.2f}M params, steps<={steps}, budget {budget_s}s, lr {lr}, "
        f"dropout {dropout}, batch {batch}x{CTX}, distill {distill if teacher is not None else 0}")
    best = (float("inf"), None, 0)
    hist = []
    t0 = time.time()
    step = 0
    loss_acc, n_acc = 0.0, 0
    while True:
        prog = max(step / steps, (time.time() - t0) / budget_s)
        if prog >= 1.0:
            break
        cur = lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g["lr"] = cur
        x, y = data.batch(batch)
        lg = logits_of(model, x).float()
        loss = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
        if teacher is not None:
            with torch.no_grad():
                tp = F.softmax(logits_of(teacher, x).float(), -1)
            soft = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tp.reshape(-1, tp.shape[-1]))
            total = (1 - distill) * loss + distill * soft
        else:
            total = loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_acc += loss.detach()
        n_acc += 1
        if step % eval_every == 0:
            tr = float(loss_acc) / n_acc
            loss_acc, n_acc = 0.0, 0
            v, _ = evaluate(model, data.val)
            hist.append({"step": step, "time_s": round(time.time() - t0, 1), "lr": cur, "train_loss": tr,
                         "val_loss": v})
            log(f"{name} step {step:5d}  lr {cur:.2e}  train(batch,dropout) {tr:.4f}  val {v:.4f}  "
                f"{(time.time() - t0) / step * 1000:.1f} ms/step")
            if v < best[0]:
                best = (v, {k: t.detach().clone() for k, t in model.state_dict().items()}, step)
    v, _ = evaluate(model, data.val)
    log(f"{name}: finished {step} steps in {time.time() - t0:.1f}s, final val {v:.4f}, best val {best[0]:.4f} "
        f"@ {best[2]}")
    if best[1] is not None and best[0] < v:
        model.load_state_dict(best[1])
    else:
        best = (v, None, step)
    for h in handles:
        h.remove()
    model.eval()
    return model, {"steps": step, "best_step": best[2], "seconds": round(time.time() - t0, 1), "lr": lr,
                   "dropout": dropout, "batch_rows": batch, "history": hist}


# ------------------------------------------------------------------------------------------------------- saving
def save(model, tok_fast, path, gen):
    os.makedirs(path, exist_ok=True)
    m = model.to(torch.bfloat16)
    m.save_pretrained(path, safe_serialization=True)
    model.float()
    tok_fast.save_pretrained(path)
    # transformers 5 writes the template to chat_template.jinja; keep a copy in tokenizer_config.json as well.
    tc_path = os.path.join(path, "tokenizer_config.json")
    with open(tc_path) as fh:
        tc = json.load(fh)
    if "chat_template" not in tc:
        tc["chat_template"] = CHATML_TEMPLATE
        with open(tc_path, "w") as fh:
            json.dump(tc, fh, indent=2, ensure_ascii=False)
    gen.save_pretrained(path)


@torch.no_grad()
def greedy(model, ids, steps):
    seq = list(ids)
    margins = []
    for _ in range(steps):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1].double()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return seq[len(ids):], min(margins)


@torch.no_grad()
def sample(model, ids, n, temperature=0.8, stop=(BOS, IM_END), dev="cuda"):
    seq = torch.tensor([ids], device=dev)
    for _ in range(n):
        logits = model(seq[:, -CTX:], use_cache=False).logits[0, -1].float()
        nxt = torch.multinomial(F.softmax(logits / temperature, -1), 1)
        seq = torch.cat([seq, nxt[None]], 1)
        if int(nxt) in stop:
            break
    return seq[0, len(ids):].tolist()


# --------------------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".train/kjv.txt")
    ap.add_argument("--out", default=".")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--budget", type=float, default=480, help="seconds of training in all (main runs + draft)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="a few steps of each, to catch errors")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")

    verses = read_corpus(args.corpus)
    train_verses = [v for i, v in enumerate(verses) if not is_val(i)]
    tok = train_tokenizer(train_verses, args.vocab)
    data = Data(tok, verses, dev)
    log(f"{len(verses)} verses, vocab {tok.get_vocab_size()}, train {data.train_tokens} tokens, "
        f"val {data.val_tokens} tokens ({data.val_bytes} bytes, {len(data.val[0])} windows), "
        f"chat stream {data.chat_tokens} tokens")

    # Main model: a short sweep of schedule lengths / dropout; keep the best validation loss.
    b = args.budget
    sweep = [dict(steps=1200, dropout=0.1, budget_s=0.14 * b), dict(steps=2500, dropout=0.2, budget_s=0.24 * b),
             dict(steps=4500, dropout=0.3, budget_s=0.37 * b)]
    draft_budget = 0.2 * b
    if args.quick:
        sweep = [dict(steps=30, dropout=0.1, budget_s=30)]
        draft_budget = 15
    main_cfg = make_config(tok.get_vocab_size(), 8, 1024)
    best = None
    runs = []
    for i, s in enumerate(sweep):
        model, info = train(f"main{i}", main_cfg, data, lr=2e-3, batch=args.batch, seed=i,
                            eval_every=10 if args.quick else 100, **s)
        val, _ = evaluate(model, data.val)
        info["val_loss"] = val
        runs.append(info)
        if best is None or val < best[0]:
            best = (val, model, i)
        else:
            del model
    val_main, main_model, best_i = best
    train_main, _ = evaluate(main_model, data.train_eval)
    log(f"main: chose run {best_i}: val {val_main:.4f}, train(eval) {train_main:.4f}")

    draft_cfg = make_config(tok.get_vocab_size(), 2, 512)
    draft_model, dinfo = train("draft", draft_cfg, data, steps=30 if args.quick else 4000, budget_s=draft_budget,
                               lr=3e-3, dropout=0.0, batch=args.batch, teacher=main_model, distill=0.5, seed=100,
                               eval_every=10 if args.quick else 100)
    val_draft, agree = evaluate(draft_model, data.val, teacher=main_model)
    train_draft, _ = evaluate(draft_model, data.train_eval)
    log(f"draft: val {val_draft:.4f}, train(eval) {train_draft:.4f}, greedy top-1 agreement with main {agree:.3f}")

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", chat_template=CHATML_TEMPLATE, model_max_length=CTX)
    gen = GenerationConfig(bos_token_id=BOS, eos_token_id=[BOS, IM_END], pad_token_id=BOS, do_sample=True,
                           temperature=0.8, top_p=0.95)
    tiny_dir = os.path.join(args.out, "models", "kjv-tiny")
    draft_dir = os.path.join(args.out, "models", "kjv-draft")
    save(main_model, fast, tiny_dir, gen)
    save(draft_model, fast, draft_dir, gen)
    log("saved", tiny_dir, draft_dir)

    # Golden fixtures: the stored bf16 weights, float32 compute on the CPU.
    torch.use_deterministic_algorithms(True)
    ref = LlamaForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    tokf = PreTrainedTokenizerFast.from_pretrained(tiny_dir)
    records = []
    for text in GOLDEN_PROMPTS:
        ids = tokf(text)["input_ids"]
        with torch.no_grad():
            logits = ref(torch.tensor([ids]), use_cache=False).logits[0, -1]
        cont, margin = greedy(ref, ids, 32)
        records.append({"text": text, "ids": ids, "last_logits": [float(v) for v in logits], "greedy": cont,
                        "greedy_min_margin": margin})
        log(f"golden {text!r}: ids {ids} margin {margin:.4f} -> {tokf.decode(cont)!r}")
    gdir = os.path.join(args.out, "tests", "golden", "kjv-tiny")
    os.makedirs(gdir, exist_ok=True)
    with open(os.path.join(gdir, "golden.json"), "w") as fh:
        json.dump({"model": "kjv-tiny", "model_dir": "models/kjv-tiny", "dtype": "bf16", "compute": "float32",
                   "prompts": records}, fh, ensure_ascii=False)
    torch.use_deterministic_algorithms(False)

    # Samples (the stored weights in float32 on the GPU, temperature 0.8).
    gpu = ref.cuda()
    dref = LlamaForCausalLM.from_pretrained(draft_dir, dtype=torch.float32).eval().cuda()
    torch.manual_seed(1234)
    samples = []
    for text in SAMPLE_PROMPTS:
        out = sample(gpu, tokf(text)["input_ids"], 80)
        samples.append({"model": "kjv-tiny", "prompt": text, "text": tokf.decode(out)})
        log(f"SAMPLE kjv-tiny | {text}{tokf.decode(out)}")
    for text in SAMPLE_PROMPTS[:2]:
        out = sample(dref, tokf(text)["input_ids"], 60)
        samples.append({"model": "kjv-draft", "prompt": text, "text": tokf.decode(out)})
        log(f"SAMPLE kjv-draft | {text}{tokf.decode(out)}")
    for q in ["John 3:16", "Genesis 1:3", "Psalms 23:1"]:
        rendered = tokf.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                            add_generation_prompt=True)
        out = sample(gpu, tokf(rendered)["input_ids"], 80)
        samples.append({"model": "kjv-tiny", "chat": q, "text": tokf.decode(out)})
        log(f"CHAT kjv-tiny | user: {q} | assistant: {tokf.decode(out)!r}")

    metrics = {
        "torch": torch.__version__, "transformers": transformers.__version__, "vocab": tok.get_vocab_size(),
        "verses": len(verses), "train_tokens": data.train_tokens, "val_tokens": data.val_tokens,
        "val_bytes": data.val_bytes, "chat_tokens": data.chat_tokens, "context": CTX,
        "main": {"params": n_params(main_model), "val_loss": val_main, "train_loss_eval": train_main,
                 "val_bits_per_byte": val_main * data.val_tokens / data.val_bytes / math.log(2),
                 "chosen_run": best_i, "runs": runs},
        "draft": {"params": n_params(draft_model), "val_loss": val_draft, "train_loss_eval": train_draft,
                  "top1_agreement_with_main": agree, **dinfo},
        "golden_min_margin": min(r["greedy_min_margin"] for r in records),
        "samples": samples, "total_seconds": round(time.time() - T0, 1),
    }
    with open(os.path.join(args.out, "metrics.json"), "w") as fh:
        json.dump(metrics, fh, indent=1, ensure_ascii=False)
    log("done")


if __name__ == "__main__":
    main()
