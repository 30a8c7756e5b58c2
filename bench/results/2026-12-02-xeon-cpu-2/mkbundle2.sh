#!/bin/bash
set -euo pipefail
S=/tmp/xeon2/stage2; D=/work/main/.device/xeon2
rm -rf $S; mkdir -p $S/lib $S/new $S/old $S/tests $D
for f in libicuuc.so.72 libspdlog.so.1.10 libfmt.so.9 libpcre2-8.so.0 libgomp.so.1 libOpenCL.so.1 libssl.so.3 libcrypto.so.3; do cp -L /lib/x86_64-linux-gnu/$f $S/lib/; done
cp /tmp/icustub/libicudata.so.72 $S/lib/
W=/work/wt-xeon/build
cp $W/bin/spindle $W/bench/bench_model_forward $W/bench/bench_linear $W/bench/make_bench_model $S/new/
cp /tmp/xeon2/old/bench_model_forward $S/old/
cp $W/tests/kernels/linear_test $W/tests/model/ops_test $W/tests/model/golden_bf16_activations_test $S/tests/
cp -a /tmp/xeon2/llst/llama $S/llama
cp -a /work/peer/llama-dl/gguf-py $S/gguf-py; rm -rf $S/gguf-py/tests $S/gguf-py/examples
cp /tmp/xeon2/run2.sh /tmp/xeon2/spec_texts.py $S/
strip --strip-unneeded $S/lib/* $S/new/* $S/old/* $S/tests/* 2>/dev/null || true
rm -f $D/partB.tar.xz $D/partB2.tar.xz
tar -C $S -cf - . | xz -9e -T2 > $D/partB2.tar.xz
ls -la $D; du -cb $D/libdnnl.tar.xz $D/partB2.tar.xz | tail -1
