#!/usr/bin/env python3
"""A perturbed copy of a GGUF file for check_logits.py's negative control: IN.gguf -> OUT.gguf with
one tensor multiplied by --scale (every other byte identical).

Scaling is exact in the block formats' terms: F32/F16/BF16 values are multiplied (and rounded back
to their type); for Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K the fp16 super-scale d (and dmin) of every
block is multiplied, which multiplies every dequantized value by the same factor (up to the fp16
rounding of d).

Needs numpy and the `gguf` package from llama.cpp's tree (PYTHONPATH=<llama.cpp>/gguf-py).
usage: perturb_gguf.py IN.gguf OUT.gguf --tensor blk.0.attn_output.weight [--scale 1.1]
"""
import argparse
import json
import shutil

import numpy as np

import gguf

Q = gguf.GGMLQuantizationType
# Byte offsets of the fp16 scales to multiply in one block, and the block's size.
SCALES = {Q.Q8_0: ([0], 34), Q.Q4_0: ([0], 18), Q.Q5_0: ([0], 22), Q.Q4_K: ([0, 2], 144),
          Q.Q5_K: ([0, 2], 176), Q.Q6_K: ([208], 210)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--tensor", required=True)
    ap.add_argument("--scale", type=float, default=1.1)
    args = ap.parse_args()
    shutil.copyfile(args.src, args.out)
    reader = gguf.GGUFReader(args.out, "r+")
    matches = [t for t in reader.tensors if t.name == args.tensor]
    if not matches:
        raise SystemExit(f"{args.src}: no tensor {args.tensor}")
    t = matches[0]
    raw = np.asarray(t.data).reshape(-1).view(np.uint8)
    if t.tensor_type == Q.F32:
        v = raw.view(np.float32)
        v *= np.float32(args.scale)
    elif t.tensor_type == Q.F16:
        v = raw.view(np.float16)
        v[:] = (v.astype(np.float32) * args.scale).astype(np.float16)
    elif t.tensor_type == Q.BF16:
        v = raw.view(np.uint16)
        f = (v.astype(np.uint32) << 16).view(np.float32) * np.float32(args.scale)
        u = f.view(np.uint32)
        v[:] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    elif t.tensor_type in SCALES:
        offsets, size = SCALES[t.tensor_type]
        blocks = raw.reshape(-1, size)
        for off in offsets:
            d = blocks[:, off:off + 2].copy().view(np.float16)
            blocks[:, off:off + 2] = (d.astype(np.float32) * args.scale).astype(np.float16).view(np.uint8)
    else:
        raise SystemExit(f"{args.tensor}: type {t.tensor_type.name} not handled")
    reader.data.flush()
    print(json.dumps({"out": args.out, "tensor": args.tensor, "type": t.tensor_type.name, "scale": args.scale}))


if __name__ == "__main__":
    main()
