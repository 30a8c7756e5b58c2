#!/bin/sh
# Dump the King James Bible (public domain) from Debian's bible-kjv-text data
# (/usr/lib/bible.data, read by the `bible` program of package bible-kjv) as one
# verse per line: "Ge1:1 In the beginning God created the heaven and the earth."
# Usage: tools/train_tiny/dump_kjv.sh [OUT]   (default .train/kjv.txt, ~4.4 MB, 31102 lines)
# Needs: apt-get install -y bible-kjv   (pulls in bible-kjv-text)
set -eu
out=${1:-.train/kjv.txt}
mkdir -p "$(dirname "$out")"
# -f turns pretty-printing off: one "RefBookC:V text" line per verse; -m raises the buffer limit.
bible -f -m 8192 "Gen1:1-Rev22:21" </dev/null >"$out"
n=$(wc -l <"$out")
[ "$n" -eq 31102 ] || { echo "expected 31102 verses, got $n" >&2; exit 1; }
echo "wrote $out ($n verses, $(wc -c <"$out") bytes)"
