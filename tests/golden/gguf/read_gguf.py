#!/usr/bin/env python3
"""An independent GGUF reader (python3 stdlib only), written from the GGUF specification, that
prints what gguf_file_test compares Spindle's reader against: the version, the alignment, every
metadata key with its type and value, and the tensor infos.

Arrays are summarised (count; the elements at indices 0, 1, 2, n // 2, n - 1; for numbers the sum
in index order as a float64; for strings the total UTF-8 byte length), so the expectation stays
small for 50k-entry vocabularies.

    python3 tests/golden/gguf/read_gguf.py FILE.gguf.gz > FILE.gguf.expected.json

A FILE ending in .gz (how tests/golden/gguf stores them) is read through Python's gzip module.
"""
import gzip
import json
import struct
import sys

SCALARS = {0: ("uint8", "<B"), 1: ("int8", "<b"), 2: ("uint16", "<H"), 3: ("int16", "<h"),
           4: ("uint32", "<I"), 5: ("int32", "<i"), 6: ("float32", "<f"), 7: ("bool", "<?"),
           10: ("uint64", "<Q"), 11: ("int64", "<q"), 12: ("float64", "<d")}
STRING, ARRAY = 8, 9


class Cursor:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def unpack(self, fmt):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.unpack("<Q")
        raw = self.data[self.pos:self.pos + n]
        assert len(raw) == n, "string past the end"
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")


def read_value(cur, vtype):
    if vtype == STRING:
        return "string", cur.string()
    if vtype == ARRAY:
        etype = cur.unpack("<I")
        n = cur.unpack("<Q")
        items = [read_value(cur, etype)[1] for _ in range(n)]
        ename = "string" if etype == STRING else SCALARS[etype][0]
        picks = sorted({i for i in (0, 1, 2, n // 2, n - 1) if 0 <= i < n})
        summary = {"count": n, "picks": {str(i): items[i] for i in picks}}
        if etype == STRING:
            summary["bytes"] = sum(len(s.encode("utf-8", errors="surrogateescape")) for s in items)
        elif ename != "bool":
            total = 0.0
            for x in items:
                total += float(x)
            summary["sum"] = total
        return "array of " + ename, summary
    name, fmt = SCALARS[vtype]
    return name, cur.unpack(fmt)


def main(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    cur = Cursor(data)
    assert data[:4] == b"GGUF", "bad magic"
    cur.pos = 4
    version = cur.unpack("<I")
    n_tensors = cur.unpack("<Q")
    n_kv = cur.unpack("<Q")
    kvs = []
    for _ in range(n_kv):
        key = cur.string()
        vtype, value = read_value(cur, cur.unpack("<I"))
        kvs.append({"key": key, "type": vtype, "value": value})
    alignment = next((kv["value"] for kv in kvs if kv["key"] == "general.alignment"), 32)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = [cur.unpack("<Q") for _ in range(cur.unpack("<I"))]
        ttype = cur.unpack("<I")
        offset = cur.unpack("<Q")
        tensors.append({"name": name, "ne": dims, "type": ttype, "offset": offset})
    data_offset = (cur.pos + alignment - 1) // alignment * alignment
    json.dump({"version": version, "alignment": alignment, "data_offset": data_offset,
               "metadata": kvs, "tensors": tensors}, sys.stdout, indent=1, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
