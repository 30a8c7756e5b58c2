#!/usr/bin/env python3
"""The table of bench/cpu_peer/run.sh's output: per metric the median and the range over the
repetitions; every ratio is taken inside one repetition (both engines of one row ran back to back)
and then summarised the same way.

usage: summarize.py OUT_DIR   (reads OUT_DIR/rep*/; prints Markdown)
"""
import glob
import json
import os
import re
import statistics
import sys


def spindle_forward(path):
    text = open(path).read()
    r = {"bw_start": float(re.search(r"memory read bandwidth \(1 GiB streaming sum, all threads\): ([\d.]+) GB/s", text)[1])}
    r["linear"] = re.search(r"linear kernel (\S+)", text)[1]
    r["prefill"] = float(re.search(r"prefill \d+ tokens: [\d.]+ s, ([\d.]+) tokens/s", text)[1])
    r["attention"] = re.search(r"attention backend ([^\s,]+)", text)[1]
    for b in (1, 16):
        m = re.search(rf"decode batch {b}, \d+ cached tokens each: [\d.]+ ms/step, ([\d.]+) tokens/s\n"
                      rf"  memory read bandwidth now ([\d.]+) GB/s, bound uses ([\d.]+) GB/s\n"
                      rf"  bound from bandwidth: ([\d.]+) tokens/s \(weights ([\d.]+) GB/step\) -> ([\d.]+)%; "
                      rf"with KV \(([\d.]+) GB/step\): ([\d.]+) tokens/s -> ([\d.]+)%", text)
        r[f"dec{b}"] = float(m[1])
        r[f"dec{b}_bw"] = float(m[3])  # the bandwidth the bound used (max of start and now)
        r[f"dec{b}_pct_w"] = float(m[6])
        r[f"dec{b}_pct_wkv"] = float(m[9])
        r["weights_gb"] = float(m[5])
        r[f"dec{b}_kv_gb"] = float(m[7])
    return r


def llama_bench(path):
    rows = json.load(open(path))
    assert len(rows) == 1, path
    return rows[0]


def served(path):
    j = json.load(open(path))
    j = j[0] if isinstance(j, list) else j  # bench/loadgen.py writes one object per level
    return {"tok_s": j["output_tok_s"], "tpot": j["tpot_ms"]["p50"], "ttft": j["ttft_ms"]["p50"]}


def stat(values, fmt="{:.1f}"):
    values = sorted(values)
    med = statistics.median(values)
    return f"{fmt.format(med)} [{fmt.format(values[0])}-{fmt.format(values[-1])}]"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: summarize.py OUT_DIR (the folder bench/cpu_peer/run.sh bench wrote, with rep*/)")
    out = sys.argv[1]
    reps = sorted(glob.glob(os.path.join(out, "rep*")))
    cols = {}

    def add(key, v):
        cols.setdefault(key, []).append(v)

    # Rows run.sh did not run (its ROWS) have no files: they are left out of the table.
    for d in reps:
        if os.path.exists(os.path.join(d, "1b-spindle.txt")):
            one_b_row(d, add)
        if all(os.path.exists(os.path.join(d, f"{m}-spindle.txt")) for m in ("small-hd32", "small-hd64")):
            small_rows(d, add, cols)
        if os.path.exists(os.path.join(d, "served-spindle.json")):
            served_row(d, add)
    print_table(len(reps), cols)


def one_b_row(d, add):
    s = spindle_forward(os.path.join(d, "1b-spindle.txt"))
    pp = llama_bench(os.path.join(d, "1b-llama-pp.json"))
    tg = llama_bench(os.path.join(d, "1b-llama-tg.json"))
    add("1b_s_dec", s["dec1"])
    add("1b_s_pct", s["dec1_pct_w"])
    add("1b_s_pct_kv", s["dec1_pct_wkv"])
    add("1b_bw", s["dec1_bw"])
    add("1b_l_tg", tg["avg_ts"])
    # llama.cpp's decode against the same bound: the same weight bytes per token, the bandwidth
    # Spindle's tool measured in this repetition.
    bound = s["dec1_bw"] / s["weights_gb"]
    add("1b_l_pct", 100 * tg["avg_ts"] / bound)
    add("1b_dec_ratio", s["dec1"] / tg["avg_ts"])
    add("1b_s_pp", s["prefill"])
    add("1b_l_pp", pp["avg_ts"])
    add("1b_pp_ratio", s["prefill"] / pp["avg_ts"])
    add("1b_s_dec16", s["dec16"])
    add("1b_s_pct16", s["dec16_pct_w"])


def small_rows(d, add, cols):
    for m in ("small-hd32", "small-hd64"):
        s = spindle_forward(os.path.join(d, f"{m}-spindle.txt"))
        pp = llama_bench(os.path.join(d, f"{m}-llama-pp.json"))
        tg = llama_bench(os.path.join(d, f"{m}-llama-tg.json"))
        add(f"{m}_s_pp", s["prefill"])
        add(f"{m}_l_pp", pp["avg_ts"])
        add(f"{m}_s_dec", s["dec1"])
        add(f"{m}_l_tg", tg["avg_ts"])
        add(f"{m}_s_pct", s["dec1_pct_wkv"])
        add(f"{m}_attn", s["attention"])
    add("hd_dec_ratio", cols["small-hd32_s_dec"][-1] / cols["small-hd64_s_dec"][-1])
    add("hd_pp_ratio", cols["small-hd32_s_pp"][-1] / cols["small-hd64_s_pp"][-1])


def served_row(d, add):
    sv = served(os.path.join(d, "served-spindle.json"))
    lv = served(os.path.join(d, "served-llama.json"))
    add("sv_s_tok", sv["tok_s"])
    add("sv_s_tpot", sv["tpot"])
    add("sv_s_ttft", sv["ttft"])
    add("sv_l_tok", lv["tok_s"])
    add("sv_l_tpot", lv["tpot"])
    add("sv_l_ttft", lv["ttft"])
    add("sv_tpot_ratio", sv["tpot"] / lv["tpot"])


def print_table(num_reps, c):
    f2 = "{:.2f}"
    print(f"{num_reps} repetitions; each cell: median [min-max]; ratios per repetition.\n")
    print("| case | Spindle | llama.cpp | Spindle / llama.cpp |")
    print("|---|---|---|---|")
    if "1b_s_dec" in c:
        print(f"| Llama-3.2-1B shape bf16, decode batch 1, 512 cached (tok/s) | {stat(c['1b_s_dec'], f2)} | "
              f"{stat(c['1b_l_tg'], f2)} (tg16 @ d512) | {stat(c['1b_dec_ratio'], f2)} |")
        print(f"| same, % of the read-bandwidth bound (weights only) | {stat(c['1b_s_pct'])}% | {stat(c['1b_l_pct'])}% | |")
        print(f"| same, prefill 512 (tok/s), Spindle `--matmul-precision auto` | {stat(c['1b_s_pp'], f2)} | "
              f"{stat(c['1b_l_pp'], f2)} (pp512) | {stat(c['1b_pp_ratio'], f2)} |")
    if "hd_dec_ratio" in c:
        for m, name in (("small-hd32", "head_dim 32 (8/4 heads)"), ("small-hd64", "head_dim 64 (4/2 heads)")):
            print(f"| 6.8M Llama {name}, prefill 981 (tok/s) | {stat(c[m + '_s_pp'], '{:.0f}')} | "
                  f"{stat(c[m + '_l_pp'], '{:.0f}')} (pp981) | |")
            print(f"| 6.8M Llama {name}, decode batch 1, 981 cached (tok/s) | {stat(c[m + '_s_dec'], '{:.0f}')} | "
                  f"{stat(c[m + '_l_tg'], '{:.0f}')} (tg64 @ d981) | |")
    if "sv_s_tpot" in c:
        print(f"| 6.8M head_dim 64 served, C=1, 128-token prompts, 64 out: TPOT p50 (ms) | {stat(c['sv_s_tpot'], f2)} | "
              f"{stat(c['sv_l_tpot'], f2)} (llama-server) | {stat(c['sv_tpot_ratio'], f2)} |")
        print(f"| same, output tok/s | {stat(c['sv_s_tok'], '{:.0f}')} | {stat(c['sv_l_tok'], '{:.0f}')} | |")
        print(f"| same, TTFT p50 (ms) | {stat(c['sv_s_ttft'], f2)} | {stat(c['sv_l_ttft'], f2)} | |")
    print()
    if "1b_s_dec" in c:
        print(f"- Read bandwidth the 1B decode bound used (bench_model_forward, same run): {stat(c['1b_bw'])} GB/s; "
              f"Spindle 1B decode with the KV reads counted: {stat(c['1b_s_pct_kv'])}% of the bound; "
              f"batch 16: {stat(c['1b_s_dec16'], f2)} tok/s, {stat(c['1b_s_pct16'])}% of its weight bound.")
    if "hd_dec_ratio" in c:
        print(f"- head_dim 32 over head_dim 64 (Spindle, per repetition): decode {stat(c['hd_dec_ratio'], f2)}, "
              f"prefill {stat(c['hd_pp_ratio'], f2)}; attention backends {sorted(set(c['small-hd32_attn']))} / "
              f"{sorted(set(c['small-hd64_attn']))}.")


if __name__ == "__main__":
    main()
