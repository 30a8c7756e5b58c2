#!/bin/bash
# makes /work/main/.device/xeon2/{libdnnl.tar.xz,partB.tar.xz}
set -euo pipefail
S=/tmp/xeon2/stage; D=/work/main/.device/xeon2
rm -rf $S; mkdir -p $S/a/lib $S/b/lib $S/b/new $S/b/old $D
if [[ ! -f $D/libdnnl.tar.xz ]]; then
  cp -L /lib/x86_64-linux-gnu/libdnnl.so.2 $S/a/lib/; strip --strip-unneeded $S/a/lib/*
  tar -C $S/a -cf - lib | xz -9 -T2 > $D/libdnnl.tar.xz
fi
for f in libicuuc.so.72 libspdlog.so.1.10 libfmt.so.9 libpcre2-8.so.0 libgomp.so.1 libOpenCL.so.1; do cp -L /lib/x86_64-linux-gnu/$f $S/b/lib/; done
cp /tmp/icustub/libicudata.so.72 $S/b/lib/
W=/work/wt-xeon/build
cp $W/bin/spindle $W/bench/bench_model_forward $W/bench/bench_spec_verify $W/bench/bench_linear $W/bench/make_bench_model $S/b/new/
cp /tmp/xeon2/old/bench_model_forward $S/b/old/
cp /tmp/xeon2/run*.sh $S/b/ 2>/dev/null || true
strip --strip-unneeded $S/b/lib/* $S/b/new/* $S/b/old/* 2>/dev/null || true
tar -C $S/b -cf - . | xz -9 -T2 > $D/partB.tar.xz
ls -la $D
