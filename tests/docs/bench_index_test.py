#!/usr/bin/env python3
"""bench/results stays an index (bench/results/INDEX.md):
- every entry of bench/results (folder or file, INDEX.md aside) has a line in INDEX.md, and every
  folder an INDEX line names exists (a name in parentheses marks one that left the tree);
- fewer than 400 files, and none of the kinds that live in git history only (.log, .err, .diff,
  .patch, .cc, .cu, .py, .sh: raw logs, patches and unbuilt sources);
- every bench/results path cited in src/, tests/, bench/, tools/, scripts/, docs/, README.md and
  ARCHITECTURE.md exists (a glob such as dp-serving* must match something).
Exit status 1 names each violation.

  python3 tests/docs/bench_index_test.py SOURCE_DIR
"""
import glob
import os
import re
import sys

from doc_check import files_under, finish

RAW_KINDS = (".log", ".err", ".diff", ".patch", ".cc", ".cu", ".py", ".sh")
CITING = ("src", "tests", "bench", "tools", "scripts", "docs", "README.md", "ARCHITECTURE.md")
CITE = re.compile(r"bench/results/([A-Za-z0-9._*/-]+)")


def index_names(index_path):
    names = set()
    for line in open(index_path, encoding="utf-8"):
        if not line.startswith("| ") or line.startswith("| date") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        for name in cells[-1].split(","):
            names.add(name.strip())
    return names


def cited_paths(root):
    for top in CITING:
        base = os.path.join(root, top)
        for path in files_under(base):
            if os.sep + os.path.join("bench", "results") + os.sep in path + os.sep and top == "bench":
                continue  # the summaries themselves cite raw files through their "Raw files" sections
            try:
                text = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for m in CITE.finditer(line):
                    yield os.path.relpath(path, root), number, m.group(1).rstrip(".,);:")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    results = os.path.join(root, "bench", "results")
    problems = []
    index = os.path.join(results, "INDEX.md")
    names = set()
    if os.path.exists(index):
        names = index_names(index)
    else:
        problems.append("bench/results/INDEX.md is missing")
    entries = set(os.listdir(results)) - {"INDEX.md"}
    for entry in sorted(entries - names):
        problems.append(f"bench/results/{entry}: no line in bench/results/INDEX.md")
    for name in sorted(names - entries):
        if not (name.startswith("(") and name.endswith(")")):
            problems.append(f"bench/results/INDEX.md names '{name}', which is not in bench/results")
    files = files_under(results)
    if len(files) >= 400:
        problems.append(f"bench/results holds {len(files)} files (limit 399): raw files belong in git history")
    for f in sorted(files):
        if f.endswith(RAW_KINDS):
            problems.append(f"{os.path.relpath(f, root)}: a raw log, patch or source; cite it by commit instead")
    for path, number, cited in cited_paths(root):
        if "DATE" in cited or "$" in cited or cited.endswith("-"):
            continue  # a script's default output folder, e.g. bench/results/serving-DATE
        pattern = os.path.join(results, cited)
        if not (glob.glob(pattern) or glob.glob(pattern + "*")):
            problems.append(f"{path}:{number}: cites bench/results/{cited}, which is not in the tree "
                            f"(cite its INDEX entry's folder)")
    return finish(problems, f"bench/results: {len(entries)} entries, all indexed; {len(files)} files; every cited path exists")


if __name__ == "__main__":
    sys.exit(main())
