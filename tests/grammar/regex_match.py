#!/usr/bin/env python3
"""Independent truth for regex_parser_test: python3's re. stdin: JSON lines
{"pattern": p, "text": t, "search": bool}; stdout per line: 1 when re.fullmatch (or, for
search, re.search as JSON Schema's pattern uses it) matches, else 0. ASCII flag: \\d \\w \\s are
the ECMA-262 ASCII classes on the ASCII texts the test generates."""
import json
import re
import sys

for line in sys.stdin:
    job = json.loads(line)
    pattern = job["pattern"]
    # ECMA-262's $ (no multiline flag) matches only at the end; Python's also before a final
    # newline, so the trailing anchor becomes Python's \Z.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + "\\Z"
    rx = re.compile(pattern, re.ASCII)
    hit = rx.search(job["text"]) if job["search"] else rx.fullmatch(job["text"])
    print("1" if hit else "0")
