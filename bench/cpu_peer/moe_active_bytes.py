#!/usr/bin/env python3
"""The bytes a batch-1 decode step reads from a mixture-of-experts GGUF file's weights (issue 48,
the CPU bound): every routed expert tensor (blk.N.ffn_{gate,up,down}_exps) counts
expert_used_count / expert_count of its bytes (the selected experts' slices), token_embd one row
(the lookup; unless it is also the LM head: no output.weight), every other tensor (attention,
norms, routers, shared experts, dense layers, the LM head) in full. KV reads are not counted.

(The machine's read bandwidth is not measured here: numpy's reductions are compute-bound on this
VM, 4.5 GB/s with 2 threads; bench_model_forward's streaming sum measures it.)

usage: moe_active_bytes.py FILE.gguf
Needs numpy and llama.cpp's gguf-py on PYTHONPATH.
"""
import argparse
import json

import gguf


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.parts[f.data[0]][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    args = ap.parse_args()
    r = gguf.GGUFReader(args.file)
    arch = str(r.fields["general.architecture"].parts[-1].tobytes(), "utf-8")
    experts = int(field(r, f"{arch}.expert_count") or 0)
    used = int(field(r, f"{arch}.expert_used_count") or 0)
    tied = not any(t.name == "output.weight" for t in r.tensors)
    total = active_experts = all_experts = other = 0
    for t in r.tensors:
        n = int(t.n_bytes)
        total += n
        if t.name.endswith("_exps.weight"):
            all_experts += n
            active_experts += n * used // experts
        elif t.name == "token_embd.weight" and not tied:
            other += n // int(t.shape[-1])  # one row (shape is ne: [cols, rows])
        else:
            other += n
    out = {"file": args.file, "architecture": arch, "experts": experts, "used": used, "file_bytes": total,
           "expert_bytes": all_experts, "active_expert_bytes": active_experts, "other_bytes_read": other,
           "active_bytes_per_token": active_experts + other}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
