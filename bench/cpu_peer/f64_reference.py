#!/usr/bin/env python3
"""Both engines against a float64 forward over the dequantized weights of a GGUF Llama file
(issue 45, item 5: the independent truth that check_logits.py's engine-vs-engine check lacks).

  collect   asks llama-server for PROMPTS greedy continuations of check_logits.py's random prompts
            (same --seed / --vocab / --min-id / --prompt-tokens: the same prompts), with the top 5
            logprobs and ids at every generated position; then asks Spindle (OpenAI API) for the
            vLLM-style prompt_logprobs of prompt + llama.cpp's continuation, so both engines are read
            at the same contexts, by token id, whatever their greedy choices. -> COLLECTED.json
  forward   a float64 forward over the same contexts, written from the GGUF format and the llama
            architecture as llama.cpp defines them: weights dequantized by llama.cpp's gguf-py
            (gguf.quants.dequantize, independent of Spindle) and kept f32, every product and sum in
            float64, RMSNorm, RoPE on adjacent pairs (GGUF llama stores Q/K rows permuted for it),
            rope_freqs.weight factors dividing the frequencies, GQA, causal softmax, SwiGLU, tied or
            separate output. --act models an engine's activation rounding before each product
            (exact: none; spindle: int8 per 32 with an f32 scale amax/127, round half to even, as
            src/kernels/cpu/quant_linear.h states; llama: ggml's vec_dot_type of the weight: Q8_K per
            256 (iscale -127/max) for K-quants, Q8_0 per 32 with an fp16 scale for Q8_0, bf16 / f16
            for such weights); --kv rounds K (after RoPE) and V as the engine's cache stores them
            (and, for llama, Q as its flash attention does: --round-q). -> F64.json (per position
            the f64 top 5 and the f64 logprob of every id either engine lists)
  compare   per engine, the largest |engine logprob - f64 logprob| over the engine's top 5 ids, and
            engine vs engine over their common ids (check_logits.py's measure), as a table; with
            --margin the three-way verdict and the derived two-way tolerance (compare's docstring).

Layer by layer over all prompts at once (one dequantization per tensor), so memory is one layer's
f32 weights (~0.25 GB for the 1B shape) plus the token table. Needs numpy (python3-numpy); a fast
BLAS (libopenblas0-pthread via LD_LIBRARY_PATH) makes the 1B forward minutes instead of tens.

usage: f64_reference.py collect --llama URL --spindle URL --vocab V [--min-id 258] [--prompts 8]
                                [--tokens 32] [--prompt-tokens 16] [--seed 1] --out C.json
       f64_reference.py forward --gguf FILE --collected C.json [--act exact|spindle|llama]
                                [--kv f64|bf16|f16] [--round-q] --out F.json
       f64_reference.py compare --collected C.json --f64 F.json [--f64 G.json ...]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = 5


def read_json(path):
    """A .json or .json.gz file (bench/results keeps them gzipped)."""
    import gzip
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


# ---- collect --------------------------------------------------------------------------------

def collect(args):
    sys.path.insert(0, HERE)
    import random
    import check_logits as cl
    rng = random.Random(args.seed)  # the same draws as check_logits.py's main()
    out = {"args": vars(args), "prompts": []}
    for p in range(args.prompts):
        prompt = [rng.randrange(args.min_id, args.vocab)
                  for _ in range(rng.randint(args.prompt_tokens // 2, args.prompt_tokens))]
        ref = cl.generate("llama", args.llama, prompt, args.tokens, "")
        ids = [x.id for x in ref]
        llama_top = [[[t[0], t[2]] for t in x.top] for x in ref]
        body = {"prompt": prompt + ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": TOP}
        r = cl.post(args.spindle + "/v1/completions", body)["choices"][0]["prompt_logprobs"]
        spindle_top = []
        for j in range(len(ids)):
            d = r[len(prompt) + j]
            top = sorted(((int(k), v["logprob"]) for k, v in d.items() if v["rank"] <= TOP), key=lambda t: -t[1])
            spindle_top.append([list(t) for t in top])
        out["prompts"].append({"prompt": prompt, "llama_ids": ids, "llama_top": llama_top, "spindle_top": spindle_top})
        print(f"prompt {p}: {len(prompt)} + {len(ids)} tokens", file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(out, f)


# ---- forward --------------------------------------------------------------------------------

def load_gguf(path):
    sys.path.insert(0, os.environ.get("GGUF_PY", "/work/peer/llama.cpp/gguf-py"))
    import gguf
    return gguf, gguf.GGUFReader(path)


def field(reader, name, default=None):
    f = reader.fields.get(name)
    return default if f is None else f.contents()


def round_dtype(x, dtype):
    import numpy as np
    if dtype == "f64":
        return x
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":  # round to nearest even on the f32 bits
        b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    if dtype == "f32":
        return x.astype(np.float32).astype(np.float64)
    raise ValueError(dtype)


def quantize_blocks(x, block, scheme):
    """x [m, k] float64 -> the dequantized value of its per-block int8 rounding."""
    import numpy as np
    m, k = x.shape
    xb = x.astype(np.float32).reshape(m, k // block, block)
    amax = np.abs(xb).max(axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        if scheme == "spindle":  # f32 dx = amax / 127, q = rne(x * f32(1 / dx)), |q| <= 127
            dx = (amax / np.float32(127)).astype(np.float32)
            inv = np.where(dx > 0, np.float32(1) / dx, np.float32(0)).astype(np.float32)
            q = np.clip(np.rint(xb * inv), -127, 127)
            deq = q.astype(np.float64) * dx.astype(np.float64)
        elif scheme == "q8_0":  # ggml quantize_row_q8_0 (x86): d = amax/127 stored fp16, q = rne(x * 127/amax)
            d = (amax / np.float32(127)).astype(np.float32)
            inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
            q = np.rint(xb * inv)
            deq = q.astype(np.float64) * d.astype(np.float16).astype(np.float64)
        elif scheme == "q8_K":  # ggml quantize_row_q8_K_ref: iscale = -127/max (signed), q = min(127, rne(iscale x))
            idx = np.abs(xb).argmax(axis=2)[..., None]
            mx = np.take_along_axis(xb, idx, axis=2)
            iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
            q = np.minimum(127, np.rint(xb * iscale))
            d = np.where(iscale != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
            deq = q.astype(np.float64) * d.astype(np.float64)
        else:
            raise ValueError(scheme)
    return deq.reshape(m, k)


def round_activations(x, act, wtype):
    """The activations an engine multiplies a weight of GGML type name `wtype` with."""
    if act == "exact":
        return x
    if act == "spindle":
        return x if wtype in ("F32", "BF16", "F16") else quantize_blocks(x, 32, "spindle")
    # llama.cpp: the weight type's vec_dot_type
    if wtype == "F32":
        return x
    if wtype == "F16":
        return round_dtype(x, "f16")
    if wtype == "BF16":
        return round_dtype(x, "bf16")
    if wtype in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        return quantize_blocks(x, 32, "q8_0")
    if wtype in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        return quantize_blocks(x, 256, "q8_K")
    raise ValueError(f"no llama.cpp activation model for {wtype}")


class Weights:
    def __init__(self, path):
        self.gguf, self.reader = load_gguf(path)
        self.tensors = {t.name: t for t in self.reader.tensors}

    def get(self, name):
        """(f32 array [rows, cols] as the file's row-major data, GGML type name)."""
        import numpy as np
        t = self.tensors[name]
        a = self.gguf.quants.dequantize(t.data, t.tensor_type)
        return np.asarray(a, dtype=np.float32), t.tensor_type.name

    def has(self, name):
        return name in self.tensors


def linear(x, w, wtype, act):
    import numpy as np
    xa = round_activations(x, act, wtype)
    return xa @ w.astype(np.float64).T


def rms_norm(x, w, eps):
    import numpy as np
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * w.astype(np.float64)


def rope(x, pos, n_rot, base, factors):
    """x [T, H, hd] float64; rotates adjacent pairs (2i, 2i+1), i < n_rot / 2 (llama.cpp's NORM mode)."""
    import numpy as np
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot)
    if factors is not None:
        inv = inv / factors.astype(np.float64)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out[..., 0:n_rot:2] = a * c - b * s
    out[..., 1:n_rot:2] = a * s + b * c
    return out


def forward(args):
    import numpy as np
    col = read_json(args.collected)
    W = Weights(args.gguf)
    r = W.reader
    arch = field(r, "general.architecture")
    if arch != "llama":
        sys.exit(f"f64_reference.py: {args.gguf}: architecture {arch!r}, only 'llama' is written here")
    D = int(field(r, "llama.embedding_length"))
    L = int(field(r, "llama.block_count"))
    H = int(field(r, "llama.attention.head_count"))
    HKV = int(field(r, "llama.attention.head_count_kv", H))
    hd = int(field(r, "llama.attention.key_length", D // H))
    n_rot = int(field(r, "llama.rope.dimension_count", hd))
    base = float(field(r, "llama.rope.freq_base", 10000.0))
    eps = float(field(r, "llama.attention.layer_norm_rms_epsilon"))
    if field(r, "llama.rope.scaling.type") not in (None, "none", "linear") or field(r, "llama.rope.scaling.factor"):
        sys.exit("f64_reference.py: rope scaling other than rope_freqs.weight is not written here")
    factors = W.get("rope_freqs.weight")[0].reshape(-1) if W.has("rope_freqs.weight") else None
    llama_act = args.act == "llama"

    # Sequences: prompt + llama.cpp's continuation; logits wanted at len(prompt)-1+j, j < tokens.
    seqs = [p["prompt"] + p["llama_ids"] for p in col["prompts"]]
    starts = np.cumsum([0] + [len(s) for s in seqs])
    ids = np.array([t for s in seqs for t in s])
    pos = np.concatenate([np.arange(len(s)) for s in seqs])
    t0 = time.time()
    emb, emb_type = W.get("token_embd.weight")
    x = emb[ids].astype(np.float64)
    print(f"embeddings {emb_type} {emb.shape}: {time.time() - t0:.0f} s", file=sys.stderr)
    if W.has("output.weight"):
        del emb
    scale = 1.0 / np.sqrt(hd)
    for layer in range(L):
        p = f"blk.{layer}."
        h = rms_norm(x, W.get(p + "attn_norm.weight")[0].reshape(-1), eps)
        wq, tq = W.get(p + "attn_q.weight")
        q = linear(h, wq, tq, args.act).reshape(-1, H, hd)
        wk, tk = W.get(p + "attn_k.weight")
        k = linear(h, wk, tk, args.act).reshape(-1, HKV, hd)
        wv, tv = W.get(p + "attn_v.weight")
        v = linear(h, wv, tv, args.act).reshape(-1, HKV, hd)
        q, k = rope(q, pos, n_rot, base, factors), rope(k, pos, n_rot, base, factors)
        k, v = round_dtype(k, args.kv), round_dtype(v, args.kv)
        if args.round_q:
            q = round_dtype(q, args.kv)
        att = np.empty_like(q)
        for s in range(len(seqs)):
            a, b = starts[s], starts[s + 1]
            n = b - a
            qs = q[a:b].transpose(1, 0, 2)                                   # [H, n, hd]
            ks = np.repeat(k[a:b].transpose(1, 0, 2), H // HKV, axis=0)      # [H, n, hd]
            vs = np.repeat(v[a:b].transpose(1, 0, 2), H // HKV, axis=0)
            sc = qs @ ks.transpose(0, 2, 1) * scale
            sc = np.where(np.tril(np.ones((n, n), dtype=bool))[None], sc, -np.inf)
            sc = np.exp(sc - sc.max(axis=2, keepdims=True))
            sc /= sc.sum(axis=2, keepdims=True)
            att[a:b] = (sc @ vs).transpose(1, 0, 2)
        wo, to = W.get(p + "attn_output.weight")
        x = x + linear(att.reshape(-1, H * hd), wo, to, args.act)
        h = rms_norm(x, W.get(p + "ffn_norm.weight")[0].reshape(-1), eps)
        wg, tg = W.get(p + "ffn_gate.weight")
        g = linear(h, wg, tg, args.act)
        wu, tu = W.get(p + "ffn_up.weight")
        u = linear(h, wu, tu, args.act)
        wd, td = W.get(p + "ffn_down.weight")
        x = x + linear(g / (1.0 + np.exp(-g)) * u, wd, td, args.act)
        print(f"layer {layer} ({tq}/{tk}/{tv}/{to}, {tg}/{tu}/{td}): {time.time() - t0:.0f} s", file=sys.stderr)

    # Only the positions the engines were read at.
    want = np.concatenate([starts[s] + len(p["prompt"]) - 1 + np.arange(len(p["llama_ids"]))
                           for s, p in enumerate(col["prompts"])])
    h = rms_norm(x[want], W.get("output_norm.weight")[0].reshape(-1), eps)
    if W.has("output.weight"):
        out_w, out_t = W.get("output.weight")
    else:
        out_w, out_t = emb, emb_type
    ha = round_activations(h, args.act, out_t)
    logits = np.empty((len(want), out_w.shape[0]))
    for c in range(0, out_w.shape[0], 16384):
        logits[:, c:c + 16384] = ha @ out_w[c:c + 16384].astype(np.float64).T
    lse = logits.max(axis=1, keepdims=True)
    lse = lse + np.log(np.exp(logits - lse).sum(axis=1, keepdims=True))
    lp = logits - lse
    print(f"output {out_t}: {time.time() - t0:.0f} s", file=sys.stderr)

    res = {"gguf": args.gguf, "act": args.act, "kv": args.kv, "round_q": args.round_q, "prompts": []}
    row = 0
    for p in col["prompts"]:
        positions = []
        for j in range(len(p["llama_ids"])):
            top = np.argsort(-lp[row])[:TOP]
            named = {t[0] for t in p["llama_top"][j]} | {t[0] for t in p["spindle_top"][j]}
            positions.append({"top": [[int(i), float(lp[row, i])] for i in top],
                              "lp": {str(i): float(lp[row, i]) for i in sorted(named)}})
            row += 1
        res["prompts"].append(positions)
    with open(args.out, "w") as f:
        json.dump(res, f)


# ---- compare --------------------------------------------------------------------------------

def gaps(col, f64):
    """Per position: |llama - f64|, |spindle - f64| (max over the engine's top 5) and
    |spindle - llama| (max over common ids)."""
    rows = []
    for pi, p in enumerate(col["prompts"]):
        for j in range(len(p["llama_ids"])):
            ref = f64["prompts"][pi][j]["lp"] if f64 else None
            lt, st = dict((a, b) for a, b in p["llama_top"][j]), dict((a, b) for a, b in p["spindle_top"][j])
            row = {"prompt": pi, "pos": j}
            if ref is not None:
                row["llama"] = max(abs(v - ref[str(i)]) for i, v in lt.items())
                row["spindle"] = max(abs(v - ref[str(i)]) for i, v in st.items())
                f64top = f64["prompts"][pi][j]["top"]
                row["f64_margin"] = f64top[0][1] - f64top[1][1]
            common = lt.keys() & st.keys()
            row["spindle_llama"] = max((abs(lt[i] - st[i]) for i in common), default=0.0)
            rows.append(row)
    return rows


def stats(values):
    v = sorted(values)
    n = len(v)
    return {"n": n, "max": v[-1], "p99": v[min(n - 1, int(0.99 * n))], "p50": v[n // 2], "mean": sum(v) / n}


def model_error(f64, exact):
    """Per position: the largest |modelled-rounding f64 logprob - exact f64 logprob| over the ids
    either engine lists (what the engine's own activation / KV rounding alone moves the truth by)."""
    out = []
    for pa, pb in zip(f64["prompts"], exact["prompts"]):
        for a, b in zip(pa, pb):
            out.append(max(abs(a["lp"][k] - b["lp"][k]) for k in b["lp"]))
    return out


def compare(args):
    """Table of the gaps; with --margin, the three-way verdict. Each engine against the exact f64
    forward (the first --f64) and its own modelled rounding (the first --f64 of act spindle / act
    llama) against that forward, both computed over the same positions: the engine's mean gap within
    --mean-margin x the model's mean gap, and its largest within --margin x the model's largest.
    The two-way tolerance for check_logits.py: --margin x (the sum of the two models' largest gaps),
    every term computed in float64 alone."""
    col = read_json(args.collected)
    runs = [read_json(path) for path in args.f64]
    exact = runs[0]
    print("| f64 forward | positions | llama.cpp vs f64: max / p99 / mean | Spindle vs f64: max / p99 / mean "
          "| Spindle vs llama.cpp: max / p99 / mean | max per position of the two gaps' sum "
          "| this rounding model vs exact f64: max / p99 / mean |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda s: f"{s['max']:.4f} / {s['p99']:.4f} / {s['mean']:.4f}"
    model = {}
    for run in runs:
        rows = gaps(col, run)
        sl, ss, sx = stats([r["llama"] for r in rows]), stats([r["spindle"] for r in rows]), \
            stats([r["spindle_llama"] for r in rows])
        both = max(r["llama"] + r["spindle"] for r in rows)
        me = stats(model_error(run, exact))
        if run is not exact:
            model.setdefault(run["act"], me)
        label = f"act {run['act']}, kv {run['kv']}" + (", q rounded" if run.get("round_q") else "")
        print(f"| {label} | {sl['n']} | {fmt(sl)} | {fmt(ss)} | {fmt(sx)} | {both:.4f} | {fmt(me)} |")
        if args.rows:
            for r in rows:
                print(json.dumps(r))
    if args.margin is None:
        return
    rows = gaps(col, exact)
    ok = True
    for engine in ("llama", "spindle"):
        if engine not in model:
            sys.exit(f"f64_reference.py compare: no --f64 run with act {engine} to derive {engine}'s bound from")
        g = stats([r[engine] for r in rows])
        m = model[engine]
        for what, margin in (("mean", args.mean_margin), ("max", args.margin)):
            good = g[what] <= margin * m[what]
            ok &= good
            print(f"{engine} vs exact f64, {what}: {g[what]:.4f}; bound {margin} x {m[what]:.4f} (its modelled "
                  f"rounding vs exact f64) = {margin * m[what]:.4f}: {'PASS' if good else 'FAIL'}")
    derived = args.margin * (model["llama"]["max"] + model["spindle"]["max"])
    worst = max(r["spindle_llama"] for r in rows)
    print(f"Spindle vs llama.cpp: {worst:.4f}; derived two-way tolerance {args.margin} x ({model['llama']['max']:.4f} + "
          f"{model['spindle']['max']:.4f}) = {derived:.4f}: {'PASS' if worst <= derived else 'FAIL'}")
    ok &= worst <= derived
    print(json.dumps({"summary": "PASS" if ok else "FAIL", "margin": args.margin, "mean_margin": args.mean_margin,
                      "derived_two_way_tolerance": round(derived, 4)}))
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--llama", required=True)
    c.add_argument("--spindle", required=True)
    c.add_argument("--vocab", type=int, required=True)
    c.add_argument("--min-id", type=int, default=258)
    c.add_argument("--prompts", type=int, default=8)
    c.add_argument("--tokens", type=int, default=32)
    c.add_argument("--prompt-tokens", type=int, default=16)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--out", required=True)
    fw = sub.add_parser("forward")
    fw.add_argument("--gguf", required=True)
    fw.add_argument("--collected", required=True)
    fw.add_argument("--act", choices=["exact", "spindle", "llama"], default="exact")
    fw.add_argument("--kv", choices=["f64", "f32", "bf16", "f16"], default="f64")
    fw.add_argument("--round-q", action="store_true", help="round Q to the --kv dtype too (llama.cpp's flash attention)")
    fw.add_argument("--out", required=True)
    cm = sub.add_parser("compare")
    cm.add_argument("--collected", required=True)
    cm.add_argument("--f64", action="append", required=True)
    cm.add_argument("--rows", action="store_true", help="also print every position's gaps")
    cm.add_argument("--margin", type=float, help="three-way verdict: each engine's largest gap to the exact f64 "
                    "forward (the first --f64) within MARGIN x its modelled rounding's largest (f64_check.sh: 1.5)")
    cm.add_argument("--mean-margin", type=float, default=1.25, help="and its mean gap within this x the model's mean")
    args = ap.parse_args()
    {"collect": collect, "forward": forward, "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
