#!/usr/bin/env python3
"""ARCHITECTURE.md stays a map: at most 16 KB (16,000 bytes), and no Markdown table cell longer
than 600 characters (the kernels/ row was once one 6,854-character cell). Exit status 1 names each
violation (the file's size, or the line and column of the cell); 0 prints the measured size.
--self-test checks the checker on files written to a temporary folder (one within both limits, one
too large, one with a long cell, one whose long cell is inside a code block or has escaped pipes).

  python3 tests/docs/architecture_map_test.py ARCHITECTURE.md [--max-bytes N] [--max-cell N]
  python3 tests/docs/architecture_map_test.py --self-test
"""
import argparse
import os
import re
import sys
import tempfile

from doc_check import finish


def table_cells(line):
    """The cells of a Markdown table row (a line starting with '|'); escaped pipes stay in a cell."""
    body = line.strip()
    if not body.startswith("|"):
        return []
    body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def check(path, max_bytes, max_cell):
    with open(path, "rb") as f:
        data = f.read()
    problems = []
    if len(data) > max_bytes:
        problems.append(f"{path}: {len(data)} bytes, more than {max_bytes}: move details to docs/")
    in_code = False
    for number, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for column, cell in enumerate(table_cells(line), 1):
            if len(cell) > max_cell:
                problems.append(f"{path}:{number}: table cell {column} has {len(cell)} characters, more than "
                                f"{max_cell}: '{cell[:60]}...'")
    return len(data), problems


def self_test():
    cases = [  # (text, expected number of problems)
        ("# Map\n\n| a | b |\n|---|---|\n| " + "x" * 600 + " | y |\n", 0),
        ("x" * 16_001, 1),
        ("| a | b |\n|---|---|\n| short | " + "y" * 601 + " |\n", 1),
        ("```\n| " + "z" * 700 + " |\n```\n| a \\| " + "w" * 590 + " | b |\n", 0),
        ("| a \\| " + "w" * 600 + " | b |\n", 1),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        for i, (text, expected) in enumerate(cases):
            path = os.path.join(d, f"case{i}.md")
            with open(path, "w") as f:
                f.write(text)
            _, problems = check(path, 16_000, 600)
            if len(problems) != expected:
                print(f"self-test case {i}: {len(problems)} problems, expected {expected}: {problems}", file=sys.stderr)
                failures += 1
    print(f"self-test: {len(cases) - failures} of {len(cases)} cases as expected")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description="ARCHITECTURE.md size and table-cell limits")
    p.add_argument("path", nargs="?")
    p.add_argument("--max-bytes", type=int, default=16_000)
    p.add_argument("--max-cell", type=int, default=600)
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if not a.path:
        p.error("give the path of ARCHITECTURE.md (or --self-test)")
    size, problems = check(a.path, a.max_bytes, a.max_cell)
    return finish(problems, f"{a.path}: {size} bytes (limit {a.max_bytes}); every table cell within {a.max_cell} characters")


if __name__ == "__main__":
    sys.exit(main())
