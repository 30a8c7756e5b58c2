// Writes ggml_dequant.bin: random blocks of each ggml type Spindle dequantizes, and what the
// llama.cpp snapshot's own ggml dequantize_row_* functions make of them (the independent golden
// values for dequantize_test). Built against the snapshot (not vendored here):
//
//   S=<llama.cpp snapshot d32676d7>/ggml
//   mkdir -p /tmp/ggml/ggml-cpu && cp $S/src/ggml-quants.[ch] $S/src/ggml-impl.h \
//     $S/src/ggml-common.h $S/include/*.h /tmp/ggml && cp $S/src/ggml-cpu/ggml-cpu-impl.h /tmp/ggml/ggml-cpu
//   gcc -O1 -I/tmp/ggml tests/golden/gguf/make_ggml_dequant.c /tmp/ggml/ggml-quants.c -lm -o /tmp/mk
//   /tmp/mk > tests/golden/gguf/ggml_dequant.bin
//
// File: for each type, u32 ggml type id, u32 blocks, u32 elements per block, u32 bytes per block,
// the blocks' bytes, then blocks * elements f32 values. fp16 scale fields are random finite
// values (exponent 0..30, so subnormals too); every other byte is uniformly random.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-quants.h"

void ggml_abort(const char* file, int line, const char* fmt, ...) { abort(); }
size_t ggml_row_size(enum ggml_type type, int64_t ne) { abort(); }
const char* ggml_type_name(enum ggml_type type) { return "?"; }
size_t ggml_type_size(enum ggml_type type) { abort(); }

static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {  // xorshift64*
  state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
  return (uint32_t)((state * 0x2545f4914f6cdd1dull) >> 32);
}
static uint16_t finite_half(void) {
  uint16_t h;
  do h = (uint16_t)next(); while (((h >> 10) & 31) == 31);
  return h;
}

typedef void (*dequant_fn)(const void*, float*, int64_t);
struct type_case {
  uint32_t id, elements, bytes;
  dequant_fn fn;
  int half_offsets[2];  // byte offsets of the fp16 fields in a block (-1: none)
};

int main(void) {
  const struct type_case cases[] = {
      {8, 32, 34, (dequant_fn)dequantize_row_q8_0, {0, -1}},
      {2, 32, 18, (dequant_fn)dequantize_row_q4_0, {0, -1}},
      {3, 32, 20, (dequant_fn)dequantize_row_q4_1, {0, 2}},
      {6, 32, 22, (dequant_fn)dequantize_row_q5_0, {0, -1}},
      {7, 32, 24, (dequant_fn)dequantize_row_q5_1, {0, 2}},
      {12, 256, 144, (dequant_fn)dequantize_row_q4_K, {0, 2}},
      {13, 256, 176, (dequant_fn)dequantize_row_q5_K, {0, 2}},
      {14, 256, 210, (dequant_fn)dequantize_row_q6_K, {208, -1}},
  };
  const uint32_t blocks = 12;
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const struct type_case* t = &cases[c];
    uint8_t* data = malloc(blocks * t->bytes);
    float* out = malloc(blocks * t->elements * sizeof(float));
    for (uint32_t i = 0; i < blocks * t->bytes; ++i) data[i] = (uint8_t)next();
    for (uint32_t b = 0; b < blocks; ++b) {
      for (int k = 0; k < 2; ++k) {
        if (t->half_offsets[k] < 0) continue;
        const uint16_t h = finite_half();
        memcpy(data + b * t->bytes + t->half_offsets[k], &h, 2);
      }
    }
    t->fn(data, out, (int64_t)blocks * t->elements);
    const uint32_t head[4] = {t->id, blocks, t->elements, t->bytes};
    fwrite(head, sizeof(head), 1, stdout);
    fwrite(data, t->bytes, blocks, stdout);
    fwrite(out, sizeof(float), blocks * t->elements, stdout);
    free(data);
    free(out);
  }
  return 0;
}
