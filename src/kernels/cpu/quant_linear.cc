// Quantized linear products: names, the repack from GGUF blocks, activation quantization, the
// unsupported reasons and the dispatch to the per-ISA kernels (quant_linear_<isa>.cc).
#include "kernels/cpu/quant_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/cpu/quant_linear_isa.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

namespace ql = quant_layout;

// One row's GGUF block unpacked: quants in their stored (unsigned; Q8_0 signed) form per element,
// and the raw scale fields. Written from the block definitions of src/gguf/ggml_blocks.h.
struct FileBlock {
  uint8_t q[256];
  uint16_t d = 0, dmin = 0;  // fp16 bits
  uint8_t sc[16] = {}, mn[8] = {};  // Q4_K/Q5_K: 6-bit scale and min of sub-block s; Q6_K: int8 scale of s (16)
};
// Q5_1's min as the kernels' subtracted min: the file's m with its sign bit flipped (exact).
constexpr uint16_t kFp16Sign = 0x8000;

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Element e of a 32-element 4-bit block's 16 packed bytes: low nibbles are 0..15, high 16..31.
uint8_t nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

// The 6-bit scale (which = 0) or min (1) of sub-block s of the 12 packed Q4_K/Q5_K scale bytes.
uint8_t k_scale(const uint8_t* s12, int s, int which) {
  if (s < 4) return s12[s + 4 * which] & 63;
  const int low = which == 0 ? (s12[s + 4] & 15) : (s12[s + 4] >> 4);
  const int high = s12[s - 4 * (1 - which)] >> 6;
  return static_cast<uint8_t>(low | (high << 4));
}

void unpack_block(QuantType type, const uint8_t* b, FileBlock& out) {
  switch (type) {
    case QuantType::kQ8_0:
      out.d = le16(b);
      std::memcpy(out.q, b + 2, 32);
      return;
    case QuantType::kQ4_0:
      out.d = le16(b);
      for (int e = 0; e < 32; ++e) out.q[e] = nibble32(b + 2, e);
      return;
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {  // d | (Q5_1: m) | qh u32 | qs: bit e of qh is bit 4 of element e
      const bool q5_1 = type == QuantType::kQ5_1;
      out.d = le16(b);
      if (q5_1) out.dmin = static_cast<uint16_t>(le16(b + 2) ^ kFp16Sign);
      const uint8_t* qh = b + (q5_1 ? 4 : 2);
      for (int e = 0; e < 32; ++e) {
        const int high = (qh[e / 8] >> (e % 8)) & 1;
        out.q[e] = static_cast<uint8_t>(nibble32(qh + 4, e) | high << 4);
      }
      return;
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      out.d = le16(b);
      out.dmin = le16(b + 2);
      for (int s = 0; s < 8; ++s) out.sc[s] = k_scale(b + 4, s, 0), out.mn[s] = k_scale(b + 4, s, 1);
      const uint8_t* qs = b + (type == QuantType::kQ4_K ? 16 : 48);
      for (int e = 0; e < 256; ++e) {
        const int s = e / 32, l = e % 32;
        const uint8_t byte = qs[32 * (s / 2) + l];
        int q = (s % 2 == 0) ? (byte & 15) : (byte >> 4);
        if (type == QuantType::kQ5_K) q |= ((b[16 + l] >> s) & 1) << 4;
        out.q[e] = static_cast<uint8_t>(q);
      }
      return;
    }
    case QuantType::kQ6_K: {
      out.d = le16(b + 208);
      for (int s = 0; s < 16; ++s) out.sc[s] = b[192 + s];
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, kk = (e % 128) / 32, l = e % 32;
        const uint8_t low_byte = b[64 * half + l + 32 * (kk % 2)];
        const int low = kk < 2 ? (low_byte & 15) : (low_byte >> 4);
        const int high = (b[128 + 32 * half + l] >> (2 * kk)) & 3;
        out.q[e] = static_cast<uint8_t>(low | (high << 4));
      }
      return;
    }
  }
}

// q[r][0..31]: the 32 quants of row r (r < 16) of one block. Writes the interleaved vectors.
using BlockQuants = uint8_t[16][32];

void write_bytes8(const BlockQuants& q, uint8_t* out) {  // 8 vectors
  for (int t = 0; t < 8; ++t)
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 4; ++j) out[64 * t + 4 * r + j] = q[r][4 * t + j];
}
void write_nibbles(const BlockQuants& q, uint8_t* out) {  // 4 chunks
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 4; ++j)
        out[64 * c + 4 * r + j] = static_cast<uint8_t>((q[r][4 * c + j] & 15) | (q[r][16 + 4 * c + j] & 15) << 4);
}
void write_fifth_bits(const BlockQuants& q, uint8_t* out) {  // 8 little-endian 64-bit words
  std::memset(out, 0, 64);
  for (int t = 0; t < 8; ++t)
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 4; ++j) {
        const int e = 4 * r + j;
        out[8 * t + e / 8] |= static_cast<uint8_t>(((q[r][4 * t + j] >> 4) & 1) << (e % 8));
      }
}
void write_high2(const BlockQuants& q, uint8_t* out) {  // 2 chunks
  std::memset(out, 0, 128);
  for (int h = 0; h < 2; ++h)
    for (int u = 0; u < 4; ++u)
      for (int r = 0; r < 16; ++r)
        for (int j = 0; j < 4; ++j)
          out[64 * h + 4 * r + j] |= static_cast<uint8_t>(((q[r][4 * (4 * h + u) + j] >> 4) & 3) << (2 * u));
}

void write_fp16s(const FileBlock* rows, int num_rows, bool dmin, uint8_t* out) {
  std::memset(out, 0, ql::kScaleBytes);
  for (int r = 0; r < num_rows; ++r) {
    const uint16_t v = dmin ? rows[r].dmin : rows[r].d;
    std::memcpy(out + 2 * r, &v, 2);
  }
}

int64_t unit_bytes(QuantType type) {  // repacked bytes of one file block (16 rows)
  switch (type) {
    case QuantType::kQ8_0: return ql::kQ8_0Block;
    case QuantType::kQ4_0: return ql::kQ4_0Block;
    case QuantType::kQ5_0: return ql::kQ5_0Block;
    case QuantType::kQ5_1: return ql::kQ5_1Block;
    case QuantType::kQ4_K: return ql::kQ4_KSuper;
    case QuantType::kQ5_K: return ql::kQ5_KSuper;
    case QuantType::kQ6_K: return ql::kQ6_KSuper;
  }
  return 0;
}

// The quants of one 32-element block (elements e0 .. e0 + 31) of rows [0, num_rows), zero-padded to 16.
void gather(const FileBlock* rows, int num_rows, int e0, BlockQuants& q) {
  std::memset(q, 0, sizeof(q));
  for (int r = 0; r < num_rows; ++r) std::memcpy(q[r], rows[r].q + e0, 32);
}

// Q6_K: sc[16][16], then per block of 32 its nibble chunks and high-bit chunks.
void repack_q6_k(const FileBlock* rows, int num_rows, uint8_t* out) {
  BlockQuants q;
  uint8_t* sc = out + ql::kScaleBytes;
  std::memset(sc, 0, ql::kQ6_KHeader - ql::kScaleBytes);  // the scales and the padding after them
  for (int s = 0; s < 16; ++s)
    for (int r = 0; r < num_rows; ++r) sc[16 * s + r] = rows[r].sc[s];
  for (int b = 0; b < 8; ++b) {
    uint8_t* unit = out + ql::kQ6_KHeader + b * ql::kQ6_KSub;
    gather(rows, num_rows, 32 * b, q);
    write_nibbles(q, unit);
    write_high2(q, unit + ql::kNibbleBytes);
  }
}

// Q4_K / Q5_K: dmin, sc[8][16], m[8][16], then per sub-block its nibbles (Q5_K: and fifth bits).
void repack_k_super(QuantType type, const FileBlock* rows, int num_rows, uint8_t* out) {
  BlockQuants q;
  write_fp16s(rows, num_rows, true, out + ql::kScaleBytes);
  uint8_t* sc = out + 2 * ql::kScaleBytes;
  uint8_t* mn = sc + 128;
  std::memset(sc, 0, 256);
  for (int s = 0; s < 8; ++s)
    for (int r = 0; r < num_rows; ++r) sc[16 * s + r] = rows[r].sc[s], mn[16 * s + r] = rows[r].mn[s];
  const int64_t sub = type == QuantType::kQ4_K ? ql::kQ4_KSub : ql::kQ5_KSub;
  for (int b = 0; b < 8; ++b) {
    uint8_t* unit = out + ql::kKHeader + b * sub;
    gather(rows, num_rows, 32 * b, q);
    write_nibbles(q, unit);
    if (type == QuantType::kQ5_K) write_fifth_bits(q, unit + ql::kNibbleBytes);
  }
}

// One file block column (block index kb) of group g: rows [16 g, 16 g + num_rows) into `out`.
void repack_unit(QuantType type, const FileBlock* rows, int num_rows, uint8_t* out) {
  write_fp16s(rows, num_rows, false, out);
  BlockQuants q;
  uint8_t* unit = out + ql::kScaleBytes;
  switch (type) {
    case QuantType::kQ8_0:
      gather(rows, num_rows, 0, q);
      return write_bytes8(q, unit);
    case QuantType::kQ4_0:
      gather(rows, num_rows, 0, q);
      return write_nibbles(q, unit);
    case QuantType::kQ5_1:  // -m, then as Q5_0
      write_fp16s(rows, num_rows, true, unit);
      unit += ql::kScaleBytes;
      [[fallthrough]];
    case QuantType::kQ5_0:
      gather(rows, num_rows, 0, q);
      write_nibbles(q, unit);
      return write_fifth_bits(q, unit + ql::kNibbleBytes);
    case QuantType::kQ6_K: return repack_q6_k(rows, num_rows, out);
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: return repack_k_super(type, rows, num_rows, out);
  }
}

std::string feature_gap(const CpuInfo& cpu, std::string_view name) {
  const CpuFeature* f = cpu.find(name);
  if (f == nullptr || !f->present) return fmt::format("CPU lacks {}", name);
  if (!f->usable) return fmt::format("{} unusable: {}", name, f->reason);
  return "";
}

}  // namespace

std::string_view quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0: return "Q8_0";
    case QuantType::kQ4_0: return "Q4_0";
    case QuantType::kQ5_0: return "Q5_0";
    case QuantType::kQ5_1: return "Q5_1";
    case QuantType::kQ4_K: return "Q4_K";
    case QuantType::kQ5_K: return "Q5_K";
    case QuantType::kQ6_K: return "Q6_K";
  }
  return "?";
}

std::string_view quant_kernel_isa_name(QuantKernelIsa isa) {
  switch (isa) {
    case QuantKernelIsa::kAvx2: return "avx2";
    case QuantKernelIsa::kAvxVnni: return "avx_vnni";
    case QuantKernelIsa::kAvx512Vnni: return "avx512_vnni";
    case QuantKernelIsa::kAmxInt8: return "amx_int8";
  }
  return "?";
}

std::vector<QuantType> quant_types() {
  return {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ5_1,
          QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K};
}
std::vector<QuantKernelIsa> quant_kernel_isas() {
  return {QuantKernelIsa::kAvx2, QuantKernelIsa::kAvxVnni, QuantKernelIsa::kAvx512Vnni, QuantKernelIsa::kAmxInt8};
}

int64_t quant_file_block_elements(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: return 32;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K: return 256;
  }
  return 0;
}
int64_t quant_file_block_bytes(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0: return 34;
    case QuantType::kQ4_0: return 18;
    case QuantType::kQ5_0: return 22;
    case QuantType::kQ5_1: return 24;
    case QuantType::kQ4_K: return 144;
    case QuantType::kQ5_K: return 176;
    case QuantType::kQ6_K: return 210;
  }
  return 0;
}

PackedQuantWeight repack_quant_weight(QuantType type, const void* file_bytes, int64_t file_num_bytes, int64_t n,
                                      int64_t k, ThreadPool* pool, HugePageArena* arena) {
  const QuantRows whole{file_bytes, file_num_bytes, n};
  return repack_quant_weight(type, {&whole, 1}, k, pool, arena);
}

PackedQuantWeight repack_quant_weight(QuantType type, std::span<const QuantRows> parts, int64_t k, ThreadPool* pool,
                                      HugePageArena* arena) {
  const int64_t be = quant_file_block_elements(type);
  int64_t n = 0;
  for (const QuantRows& p : parts) n += p.rows;
  SPINDLE_CHECK(!parts.empty() && n > 0 && k > 0, "quantized weight {}: shape [{}, {}] must be positive",
                quant_type_name(type), n, k);
  SPINDLE_CHECK(k % be == 0, "quantized weight {}: row length {} is not a multiple of the block size {}",
                quant_type_name(type), k, be);
  const int64_t blocks = k / be;
  const int64_t row_bytes = blocks * quant_file_block_bytes(type);
  for (size_t i = 0; i < parts.size(); ++i) {
    const QuantRows& p = parts[i];
    SPINDLE_CHECK(p.bytes != nullptr && p.rows > 0 && p.num_bytes == p.rows * row_bytes,
                  "quantized weight {} [{}, {}]{}: {} bytes given for {} rows, the rows have {}", quant_type_name(type),
                  n, k, parts.size() > 1 ? fmt::format(", part {} of {}", i, parts.size()) : std::string(),
                  p.num_bytes, p.rows, p.rows * row_bytes);
  }
  PackedQuantWeight w;
  w.type = type;
  w.n = n;
  w.k = k;
  w.group_bytes = blocks * unit_bytes(type);
  uint8_t* dst = nullptr;
  if (arena != nullptr) {  // 64-byte aligned; every byte is written below (padding rows zeroed by repack_unit)
    w.arena_bytes = static_cast<uint8_t*>(arena->allocate(static_cast<size_t>(w.num_bytes())));
    dst = w.arena_bytes;
  } else {
    w.storage.assign(static_cast<size_t>(w.num_bytes() + 64), 0);
    w.offset = static_cast<int64_t>((64 - reinterpret_cast<uintptr_t>(w.storage.data()) % 64) % 64);
    dst = w.storage.data() + w.offset;
  }
  // Row `row` of the joined weight: in the part whose rows cover it (parts are few: a linear walk).
  const auto row_source = [&](int64_t row) {
    for (const QuantRows& p : parts) {
      if (row < p.rows) return static_cast<const uint8_t*>(p.bytes) + row * row_bytes;
      row -= p.rows;
    }
    return static_cast<const uint8_t*>(nullptr);  // (unreachable: row < n)
  };
  const auto repack_group = [&](int64_t g) {
    FileBlock rows[kQuantGroupRows];
    const uint8_t* src[kQuantGroupRows];
    const int num_rows = static_cast<int>(std::min<int64_t>(kQuantGroupRows, n - g * kQuantGroupRows));
    for (int r = 0; r < num_rows; ++r) src[r] = row_source(g * kQuantGroupRows + r);
    for (int64_t kb = 0; kb < blocks; ++kb) {
      for (int r = 0; r < num_rows; ++r) unpack_block(type, src[r] + kb * quant_file_block_bytes(type), rows[r]);
      repack_unit(type, rows, num_rows, dst + g * w.group_bytes + kb * unit_bytes(type));
    }
  };
  if (pool != nullptr) pool->parallel_for(w.num_groups(), repack_group);
  else
    for (int64_t g = 0; g < w.num_groups(); ++g) repack_group(g);
  return w;
}

namespace {

// One block of 32 (quant_linear.h): d = max|x| / 127, q = clamp(nearest-even(x * (1 / d)), -127, 127),
// the int sums of the halves in sum16; returns d. The SSE2 path (baseline x86-64: it is the per-call
// cost every kernel pays, ~3.5 ns an element through libm's nearbyint before) computes the same
// IEEE operations: the f32 product x * inv, clamped to +-127 (exact integers, so clamping before or
// after the rounding agrees) and rounded by cvtps2dq in the default nearest-even mode.
float quantize_block(const float* xb, int8_t* q, int32_t* sum16) {
#if defined(__SSE2__)
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 v[8];
  __m128 mx = _mm_setzero_ps();
  for (int j = 0; j < 8; ++j) {
    v[j] = _mm_loadu_ps(xb + 4 * j);
    mx = _mm_max_ps(mx, _mm_and_ps(v[j], abs_mask));
  }
  mx = _mm_max_ps(mx, _mm_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
  mx = _mm_max_ps(mx, _mm_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
  const float d = _mm_cvtss_f32(mx) / 127.0f;
  const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;  // a block below ~4e-37 (1 / d = inf) quantizes to 0
  const __m128 inv = _mm_set1_ps(std::isfinite(inv_d) ? inv_d : 0.0f);
  const __m128 lo = _mm_set1_ps(-127.0f), hi = _mm_set1_ps(127.0f);
  __m128i i32[8];
  for (int j = 0; j < 8; ++j) i32[j] = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(_mm_mul_ps(v[j], inv), lo), hi));
  const __m128i ones = _mm_set1_epi16(1);
  for (int h = 0; h < 2; ++h) {
    const __m128i a = _mm_packs_epi32(i32[4 * h], i32[4 * h + 1]), c = _mm_packs_epi32(i32[4 * h + 2], i32[4 * h + 3]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h), _mm_packs_epi16(a, c));
    __m128i t = _mm_add_epi32(_mm_madd_epi16(a, ones), _mm_madd_epi16(c, ones));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
    sum16[h] = _mm_cvtsi128_si32(t);
  }
  return d;
#else
  float amax = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
  const float d = amax / 127.0f;
  const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;
  const float inv = std::isfinite(inv_d) ? inv_d : 0.0f;
  sum16[0] = sum16[1] = 0;
  for (int j = 0; j < kQuantBlock; ++j) {
    q[j] = static_cast<int8_t>(std::nearbyint(std::clamp(xb[j] * inv, -127.0f, 127.0f)));
    sum16[j / 16] += q[j];
  }
  return d;
#endif
}

}  // namespace

void quant_row_terms(const QuantizedActivations& x, int32_t offset, bool halves, int64_t row_begin, int64_t row_end,
                     QuantRowTerms& out) {
  const int64_t nb = x.k / kQuantBlock, rows = row_end - row_begin, h = halves ? 2 : 1;
  out.neg_off.resize(static_cast<size_t>(rows * nb * h));
  out.dxs.resize(static_cast<size_t>(rows * nb));
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t* s16 = x.sum16.data() + (row_begin + i) * 2 * nb;
    const float* dx = x.scale.data() + (row_begin + i) * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t lo = s16[2 * b], hi = s16[2 * b + 1];
      int32_t* off = out.neg_off.data() + (i * nb + b) * h;
      if (halves) {
        off[0] = -offset * lo;
        off[1] = -offset * hi;
      } else {
        off[0] = -offset * (lo + hi);
      }
      out.dxs[static_cast<size_t>(i * nb + b)] = dx[b] * static_cast<float>(lo + hi);
    }
  }
}

void quantize_activations(const float* x, int64_t m, int64_t k, QuantizedActivations& out, ThreadPool* pool) {
  SPINDLE_CHECK(m > 0 && k > 0 && k % kQuantBlock == 0,
                "quantize_activations: shape [{}, {}]: k must be a positive multiple of {}", m, k, kQuantBlock);
  out.m = m;
  out.k = k;
  out.q.resize(static_cast<size_t>(m * k));
  out.scale.resize(static_cast<size_t>(m * k / kQuantBlock));
  out.sum16.resize(static_cast<size_t>(m * k / 16));
  const auto row = [&](int64_t i) {
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
      const int64_t e = i * k + b * kQuantBlock;
      int32_t s[2];
      out.scale[i * (k / kQuantBlock) + b] = quantize_block(x + e, out.q.data() + e, s);
      out.sum16[i * (k / 16) + 2 * b] = s[0];
      out.sum16[i * (k / 16) + 2 * b + 1] = s[1];
    }
  };
  if (pool != nullptr && m > 1) pool->parallel_for(m, row);
  else
    for (int64_t i = 0; i < m; ++i) row(i);
}

std::vector<std::string> quant_linear_unsupported_reasons(QuantKernelIsa isa, const CpuInfo& cpu) {
  std::vector<std::string_view> needed;
  switch (isa) {
    case QuantKernelIsa::kAvx2: needed = {"avx2", "fma", "f16c"}; break;
    case QuantKernelIsa::kAvxVnni: needed = {"avx2", "fma", "f16c", "avx_vnni"}; break;
    case QuantKernelIsa::kAvx512Vnni:
      needed = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"};
      break;
    case QuantKernelIsa::kAmxInt8:
      needed = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "amx_tile", "amx_int8"};
      break;
  }
  std::vector<std::string> reasons;
  for (std::string_view name : needed) {
    if (std::string gap = feature_gap(cpu, name); !gap.empty()) reasons.push_back(std::move(gap));
  }
  return reasons;
}

void quant_linear_forward(QuantKernelIsa isa, const PackedQuantWeight& w, const QuantizedActivations& x, float* y,
                          ThreadPool* pool) {
  // The reasons per ISA, found once: every product calls this (a batch-1 MoE step ~1000 times),
  // and each look-up builds strings.
  static const std::vector<std::vector<std::string>> unsupported = [] {
    const CpuInfo cpu = detect_cpu_info();
    std::vector<std::vector<std::string>> r;
    for (QuantKernelIsa i : quant_kernel_isas()) r.push_back(quant_linear_unsupported_reasons(i, cpu));
    return r;
  }();
  if (const auto& reasons = unsupported[static_cast<size_t>(isa)]; !reasons.empty()) {
    SPINDLE_CHECK(false, "quantized linear kernel {} cannot run here: {}", quant_kernel_isa_name(isa),
                  fmt::join(reasons, "; "));
  }
  SPINDLE_CHECK(x.k == w.k && x.m > 0, "quantized linear: activations [{}, {}] do not match weight [{}, {}]", x.m,
                x.k, w.n, w.k);
  void (*groups)(const QuantGroupsParams&, int64_t, int64_t) = nullptr;
  switch (isa) {
    case QuantKernelIsa::kAvx2: groups = quant_linear_groups_avx2; break;
    case QuantKernelIsa::kAvxVnni: groups = quant_linear_groups_avx_vnni; break;
    case QuantKernelIsa::kAvx512Vnni: groups = quant_linear_groups_avx512_vnni; break;
    case QuantKernelIsa::kAmxInt8: groups = quant_linear_groups_amx; break;
  }
  const QuantGroupsParams params{&w, &x, y};
  const int64_t num_groups = w.num_groups();
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  // A few tasks per thread (even shares when groups are many; balance when the machine is shared).
  const int64_t num_tasks = std::min(num_groups, threads == 1 ? int64_t{1} : threads * 4);
  const auto task = [&](int64_t t) {
    groups(params, t * num_groups / num_tasks, (t + 1) * num_groups / num_tasks);
  };
  if (pool != nullptr && num_tasks > 1) pool->parallel_for(num_tasks, task);
  else task(0);
}

void quant_linear_forward(QuantKernelIsa isa, const PackedQuantWeight& w, const float* x, int64_t m, float* y,
                          ThreadPool* pool) {
  thread_local QuantizedActivations scratch;
  quantize_activations(x, m, w.k, scratch, pool);
  quant_linear_forward(isa, w, scratch, y, pool);
}

}  // namespace spindle::kernels::cpu
