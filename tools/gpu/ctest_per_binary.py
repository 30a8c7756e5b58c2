#!/usr/bin/env python3
"""Per-binary pass / fail / skip counts from a ctest log (`ctest --output-on-failure` output).

gtest_discover_tests names each CTest case after its GoogleTest name only; the binary it runs is
in the build's tests/**/*[1]_tests.cmake files (add_test(NAME binary ...) lines). This maps one
to the other.

usage: ctest_per_binary.py CTEST_LOG BUILD_DIR   (prints a Markdown table)
"""
import collections
import glob
import os
import re
import sys


def main():
    if len(sys.argv) != 3 or not os.path.isfile(sys.argv[1]) or not os.path.isdir(sys.argv[2]):
        sys.exit("usage: ctest_per_binary.py CTEST_LOG BUILD_DIR (a ctest log file and a build folder)")
    log, build = sys.argv[1], sys.argv[2]
    owner = {}
    for path in glob.glob(os.path.join(build, "**", "*_tests.cmake"), recursive=True):
        for m in re.finditer(r"add_test\(\s*\[=\[(.+?)\]=\]\s+(\S+)", open(path).read()):
            owner[m[1].split()[0]] = os.path.basename(m[2].strip('"'))  # names may carry "  # GetParam() = ..."
    counts = collections.defaultdict(collections.Counter)
    for m in re.finditer(r"Test\s+#\d+: (\S+)[^\n]*? \.+\s*(\*{0,3})(Passed|Failed|Skipped|Not Run|Timeout|Exception|SEGFAULT)?",
                         open(log).read()):
        name, status = m[1], m[3] or "other"
        counts[owner.get(name, name if name == "deploy_manifests_test" else "?")][status] += 1
    print("| binary | passed | failed | skipped | other |")
    print("|---|---|---|---|---|")
    total = collections.Counter()
    for b in sorted(counts):
        c = counts[b]
        total.update(c)
        other = sum(v for k, v in c.items() if k not in ("Passed", "Failed", "Skipped"))
        print(f"| {b} | {c['Passed']} | {c['Failed']} | {c['Skipped']} | {other} |")
    other = sum(v for k, v in total.items() if k not in ("Passed", "Failed", "Skipped"))
    print(f"| **all** | {total['Passed']} | {total['Failed']} | {total['Skipped']} | {other} |")


if __name__ == "__main__":
    main()
