// Quantized linear products on the CPU: y[m, n] = x[m, k] . W[n, k]^T with W in a ggml block type
// (Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) and x f32, quantized per block of 32 on the fly.
//
// Weights: repack_quant_weight() takes the GGUF tensor's bytes (n rows of k / block_elements
// blocks, exactly as the file stores them) and writes the layout every int8 kernel here reads:
// groups of kQuantGroupRows = 16 rows (the last group zero-padded), each group one contiguous run
// of blocks along k. Inside a 32-element block the quants of the 16 rows are interleaved for
// vpdpbusd: "vector" t (t = 0..7) holds k = 4t..4t+3 of the 16 rows, byte 4r + j = row r,
// k = 4t + j (64 bytes; AVX2 reads rows 0-7 as the first 32 bytes, rows 8-15 as the second).
// Quants are stored unsigned (Q8_0: signed), their offset or min applied after the integer dot:
//   Q8_0 block (544 B): d fp16[16] | 8 vectors of int8 q                      w = d q
//   Q4_0 block (288 B): d fp16[16] | 4 chunks of 64 B: chunk c low nibbles = vector c,
//                       high nibbles = vector c + 4                             w = d (q - 8)
//   Q5_0 block (352 B): d fp16[16] | 4 nibble chunks as Q4_0 | 64 B of fifth bits as Q5_K's
//                                                                               w = d (q - 16)
//   Q5_1 block (384 B): d fp16[16] | -m fp16[16] (the file's m, sign flipped: the kernels' min) |
//                       4 nibble chunks | 64 B of fifth bits                    w = d q - (-m)
//   Q4_K super-block of 256 (2368 B): d fp16[16] | dmin fp16[16] | sc u8[8][16] | m u8[8][16] |
//                       8 sub-blocks of 32, each 4 nibble chunks as Q4_0        w = d sc q - dmin m
//   Q5_K super-block (2880 B): as Q4_K, each sub-block's nibble chunks followed by 64 B of fifth
//                       bits: bit e of little-endian 64-bit word t = bit 4 of vector t's byte e
//   Q6_K super-block (3392 B): d fp16[16] | sc int8[16][16] (16-element sub-block, row) | 32 B of 0 |
//                       8 blocks of 32: 4 nibble chunks, then 2 chunks of 64 B of high bits:
//                       bits 2u, 2u+1 of byte e of chunk h = bits 4, 5 of vector 4h + u's byte e
//                                                                               w = d sc (q - 32)
// Per row and block this is the file's size, except Q4_K / Q5_K / Q6_K: 148 / 180 / 212 bytes per 256
// instead of 144 / 176 / 210 (6-bit scales and mins kept one per byte; Q6_K padded so that every
// K-quant super-block is whole 64-byte lines); Q5_0 / Q5_1 keep their 22 / 24.
//
// Activations: quantize_activations() rounds x per block of 32 to int8 with an f32 scale
// dx = max|x| / 127 (q = nearest-even(x * f32(1 / dx)) clamped to +-127; a zero block, or one below
// ~4e-37 where 1 / dx overflows, has q = 0), and keeps the int sums of each half block of 16 (for the
// offsets and mins). The kernels compute, per block b
// and row n, the exact integer dot of the quants and then, in f32,
//   y += isum_b * (scale_b[n] * dx_b) - min_b[n] * (dx_b * xsum_b)
// (Q6_K: per half block of 16, one scale each; the min term only for Q4_K, Q5_K and Q5_1; isum_b
// has the type's offset, 8 for Q4_0, 16 for Q5_0, 32 for Q6_K, already taken out exactly). So a
// kernel differs from the float64 product of the dequantized W and the dequantized activations only
// by the f32 rounding of those per-block terms and of their running sum (tests/kernels/quant_linear_test.cc states the bound).
//
// Kernels (QuantKernelIsa), the same arithmetic on each ISA:
//   avx2        _mm256_maddubs_epi16 + _mm256_madd_epi16 (Q8_0: sign trick on |w|), 8 rows a vector
//   avx_vnni    the avx2 kernel with VEX vpdpbusd (Alder Lake, Sapphire Rapids and later)
//   avx512_vnni vpdpbusd on 16 rows a vector (Ice Lake, Zen 4 and later)
//   amx_int8    see quant_linear_amx.cc
// Each computes rows of x in tiles (avx512_vnni 8 rows, avx2 / avx_vnni 4, amx_int8 16; the rest
// of a row chunk in smaller ones) against every group of 16 weight rows, groups spread over the
// ThreadPool; a row's outputs do not depend on m (the integer dot is exact however it is split, and
// the f32 terms above are added in the same order per block).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/huge_page_allocator.h"

namespace spindle {
class ThreadPool;
struct CpuInfo;
}  // namespace spindle

namespace spindle::kernels::cpu {

enum class QuantType { kQ8_0, kQ4_0, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K };
enum class QuantKernelIsa { kAvx2, kAvxVnni, kAvx512Vnni, kAmxInt8 };

inline constexpr int64_t kQuantGroupRows = 16;
inline constexpr int64_t kQuantBlock = 32;  // activation block (and the unit of every kernel's k loop)

std::string_view quant_type_name(QuantType type);  // "Q8_0", ...
std::string_view quant_kernel_isa_name(QuantKernelIsa isa);  // "avx2", "avx_vnni", ...
std::vector<QuantType> quant_types();
std::vector<QuantKernelIsa> quant_kernel_isas();
// The GGUF block of the type: elements (32 or 256) and bytes (34, 18, 22, 24, 144, 176, 210).
int64_t quant_file_block_elements(QuantType type);
int64_t quant_file_block_bytes(QuantType type);

// A repacked weight (layout above). bytes: ceil(n / 16) groups of group_bytes each, 64-byte aligned.
// The storage of a weight of 2 MiB or more is advised for transparent huge pages
// (util/huge_page_allocator.h): a decode step streams every byte of it once. A weight repacked into
// a HugePageArena (smaller weights: a mixture of experts' per-expert products) has no storage; its
// bytes are at `arena_bytes`, owned by the arena, which must outlive the weight.
struct PackedQuantWeight {
  QuantType type = QuantType::kQ8_0;
  int64_t n = 0, k = 0;
  int64_t group_bytes = 0;
  std::vector<uint8_t, HugePageAllocator<uint8_t>> storage;  // over-allocated by 64 so data() can be aligned
  int64_t offset = 0;            // of the aligned start within storage
  uint8_t* arena_bytes = nullptr;  // set: the bytes are in an arena (storage empty, offset 0)
  const uint8_t* data() const { return arena_bytes != nullptr ? arena_bytes : storage.data() + offset; }
  int64_t num_groups() const { return (n + kQuantGroupRows - 1) / kQuantGroupRows; }
  int64_t num_bytes() const { return num_groups() * group_bytes; }
};

// file_bytes: n rows of k / quant_file_block_elements(type) blocks (the GGUF tensor data).
// Throws spindle::Error when k is not a multiple of the block, n or k is not positive, or
// file_num_bytes is not the tensor's size. pool: spreads groups over workers (null: serial).
// arena: where the bytes go (null: the weight's own storage); the same bytes either way.
PackedQuantWeight repack_quant_weight(QuantType type, const void* file_bytes, int64_t file_num_bytes, int64_t n,
                                      int64_t k, ThreadPool* pool = nullptr, HugePageArena* arena = nullptr);

// Whole rows of a weight as the file stores them: `rows` rows of k / quant_file_block_elements(type)
// blocks, num_bytes = rows * that row's bytes.
struct QuantRows {
  const void* bytes = nullptr;
  int64_t num_bytes = 0;
  int64_t rows = 0;
};
// The parts' rows one after another (a gate and an up projection; q, k and v) repacked as one
// weight of n = their rows in total, each part read where it lies: the same bytes as repacking the
// joined rows, without a joined copy (whose freed holes in the malloc heap stayed resident: ~84 MiB
// per layer of the Qwen3-30B-A3B shape). Throws as above, naming the part whose size is wrong.
PackedQuantWeight repack_quant_weight(QuantType type, std::span<const QuantRows> parts, int64_t k,
                                      ThreadPool* pool = nullptr, HugePageArena* arena = nullptr);

// x quantized per block of 32 (see above). q: [m, k]; scale: [m, k / 32]; sum16: [m, k / 16].
struct QuantizedActivations {
  int64_t m = 0, k = 0;
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> sum16;
};
// k must be a multiple of 32. Reuses out's vectors.
void quantize_activations(const float* x, int64_t m, int64_t k, QuantizedActivations& out, ThreadPool* pool = nullptr);

// Why the kernel cannot run on this CPU (cpuid / XCR0 / AMX permission, from CpuInfo); empty when
// it can. Every weight type above runs on every kernel.
std::vector<std::string> quant_linear_unsupported_reasons(QuantKernelIsa isa, const CpuInfo& cpu);

// y[m, n] (row-major, overwritten) = quantized x . W^T, on `isa` (which must be supported: throws
// spindle::Error naming the reasons otherwise). pool: workers (null: the calling thread only).
void quant_linear_forward(QuantKernelIsa isa, const PackedQuantWeight& w, const QuantizedActivations& x, float* y,
                          ThreadPool* pool);
// quantize_activations + quant_linear_forward (scratch reused per calling thread).
void quant_linear_forward(QuantKernelIsa isa, const PackedQuantWeight& w, const float* x, int64_t m, float* y,
                          ThreadPool* pool);

}  // namespace spindle::kernels::cpu
