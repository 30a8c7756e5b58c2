// Writes ggml_q8_0.bin: f32 rows and what the llama.cpp snapshot's own ggml quantize_row_q8_0_ref
// (the quantizer llama-quantize uses for Q8_0) makes of them — the independent golden blocks for
// quantize_q8_0_test. Built against the snapshot (not vendored here), like make_ggml_dequant.c:
//
//   S=<llama.cpp snapshot d32676d7>/ggml
//   mkdir -p /tmp/ggml/ggml-cpu && cp $S/src/ggml-quants.[ch] $S/src/ggml-impl.h \
//     $S/src/ggml-common.h $S/include/*.h /tmp/ggml && cp $S/src/ggml-cpu/ggml-cpu-impl.h /tmp/ggml/ggml-cpu
//   gcc -O1 -I/tmp/ggml tests/golden/gguf/make_ggml_q8_0.c /tmp/ggml/ggml-quants.c -lm -o /tmp/mkq8
//   /tmp/mkq8 > tests/golden/gguf/ggml_q8_0.bin
//
// File: u32 blocks, then blocks * 32 f32 inputs, then blocks * 34 bytes of Q8_0 blocks. Inputs, per
// block of 32 (xorshift64*): mostly sums of uniforms (roughly normal) times a scale 2^-12 .. 2^4,
// some with an outlier; one all-zero block; blocks whose values sit exactly on half-integer
// multiples of d (ties of the rounding); blocks of bf16-representable values (the low 16 bits
// cleared, as a bf16 checkpoint gives).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-quants.h"

void ggml_abort(const char* file, int line, const char* fmt, ...) { abort(); }
size_t ggml_row_size(enum ggml_type type, int64_t ne) { abort(); }
const char* ggml_type_name(enum ggml_type type) { return "?"; }
size_t ggml_type_size(enum ggml_type type) { abort(); }

static uint64_t state = 0x243f6a8885a308d3ull;
static uint32_t next(void) {  // xorshift64*
  state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
  return (uint32_t)((state * 0x2545f4914f6cdd1dull) >> 32);
}
static float uniform(void) { return (float)next() / 4294967296.0f - 0.5f; }  // [-0.5, 0.5)

static float bf16_truncated(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u &= 0xffff0000u;
  memcpy(&v, &u, 4);
  return v;
}

static void fill_block(uint32_t b, float* x) {
  const float scale = (float)(1u << (next() % 17)) / 4096.0f;  // 2^-12 .. 2^4
  for (int j = 0; j < 32; ++j) x[j] = (uniform() + uniform() + uniform() + uniform()) * scale;
  switch (b % 8) {
    case 1: x[next() % 32] *= 40.0f; break;            // an outlier
    case 2: if (b == 2) memset(x, 0, 32 * sizeof(float)); break;  // one all-zero block
    case 3:                                             // ties: amax = 127, so d = 1, x = n + 1/2
      for (int j = 0; j < 32; ++j) x[j] = (float)((int)(next() % 253) - 126) + 0.5f;
      x[0] = (b & 8) ? -127.0f : 127.0f;
      break;
    case 4: case 5:                                     // bf16 values
      for (int j = 0; j < 32; ++j) x[j] = bf16_truncated(x[j]);
      break;
    default: break;
  }
}

int main(void) {
  const uint32_t blocks = 64;
  float* x = malloc(blocks * 32 * sizeof(float));
  block_q8_0* y = malloc(blocks * sizeof(block_q8_0));
  for (uint32_t b = 0; b < blocks; ++b) fill_block(b, x + 32 * b);
  quantize_row_q8_0_ref(x, y, (int64_t)blocks * 32);
  fwrite(&blocks, sizeof(blocks), 1, stdout);
  fwrite(x, sizeof(float), blocks * 32, stdout);
  fwrite(y, sizeof(block_q8_0), blocks, stdout);
  free(x);
  free(y);
  return 0;
}
