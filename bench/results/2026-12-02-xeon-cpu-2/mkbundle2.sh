#!/bin/bash
# The bundle of run2.sh, in two parts small enough to travel next to the ~58 MB tree (a 7.8 MB
# part was refused; 6.9 MB passed): partL (llama.cpp's llama-bench with the sapphirerapids ggml
# variant, libssl/libcrypto, gguf-py; ~4.7 MB) and partB3 (this branch's spindle, bench tools and
# three test binaries, main's bench_model_forward, the small shared libraries, run2.sh; ~3 MB).
# With libdnnl.tar.xz from mkbundle.sh, run2.sh needs three calls back to back (the machine goes
# back 30 s after a call):
#   run carry=[.device/xeon2/libdnnl.tar.xz]: mkdir -p /tmp/x2 && python3 -c "import tarfile;tarfile.open('.device/xeon2/libdnnl.tar.xz').extractall('/tmp/x2')"
#   run carry=[.device/xeon2/partL.tar.xz]:   ls /tmp/x2/lib/libdnnl.so.2 && python3 -c "...partL.tar.xz..."
#   run carry=[.device/xeon2/partB3.tar.xz]:  ls /tmp/x2/lib/libdnnl.so.2 /tmp/x2/llama/llama-bench && python3 -c "...partB3..." && timeout 170 bash /tmp/x2/run2.sh
# (each call checks that the previous part is still there: a cold machine has lost it).
set -euo pipefail
S=/tmp/xeon2/stage2; D=/work/main/.device/xeon2; W=/work/wt-xeon/build
rm -rf $S; mkdir -p $S/b/lib $S/b/new $S/b/old $S/b/tests $S/l/lib $D
for f in libicuuc.so.72 libspdlog.so.1.10 libfmt.so.9 libpcre2-8.so.0 libgomp.so.1 libOpenCL.so.1; do cp -L /lib/x86_64-linux-gnu/$f $S/b/lib/; done
for f in libssl.so.3 libcrypto.so.3; do cp -L /lib/x86_64-linux-gnu/$f $S/l/lib/; done
cp /tmp/icustub/libicudata.so.72 $S/b/lib/   # a stub: the bench models' tokenizers have no NFC normalizer
cp $W/bin/spindle $W/bench/bench_model_forward $W/bench/bench_linear $W/bench/make_bench_model $S/b/new/
cp /tmp/xeon2/old/bench_model_forward $S/b/old/   # main's build (before this branch)
cp $W/tests/kernels/linear_test $W/tests/model/ops_test $W/tests/model/golden_bf16_activations_test $S/b/tests/
cp /tmp/xeon2/run2.sh /tmp/xeon2/spec_texts.py $S/b/
mkdir -p $S/l/llama && cp -a /work/peer/llama-dl/build/bin/libggml-base.so* /work/peer/llama-dl/build/bin/libggml.so* \
  /work/peer/llama-dl/build/bin/libggml-cpu-sapphirerapids.so /work/peer/llama.cpp/build/bin/llama-bench $S/l/llama/
cp -a /work/peer/llama.cpp/build/bin/libllama.so* /work/peer/llama.cpp/build/bin/libllama-common.so* \
  /work/peer/llama.cpp/build/bin/libllama-bench-impl.so $S/l/llama/
cp -a /work/peer/llama-dl/gguf-py $S/l/gguf-py; rm -rf $S/l/gguf-py/tests $S/l/gguf-py/examples
find $S -type f \( -name "*.so*" -o -perm -u+x \) -exec strip --strip-unneeded {} + 2>/dev/null || true
tar -C $S/b -cf - . | xz -9 -T2 > $D/partB3.tar.xz
tar -C $S/l -cf - . | xz -9 -T2 > $D/partL.tar.xz
ls -la $D
