#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "util/error.h"
#include "util/fp8.h"
#include "util/half.h"

namespace spindle::kernels::cpu {

int64_t count_query_rows(std::span<const StepSequence> sequences) {
  int64_t n = 0;
  for (const auto& s : sequences) n += s.num_new_tokens;
  return n;
}

void check_sequences(std::span<const StepSequence> sequences, const int32_t* page_tables, int page_size,
                     int num_pages, int64_t num_tokens) {
  int64_t expected_offset = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& s = sequences[i];
    SPINDLE_CHECK(s.num_new_tokens >= 0 && s.num_cached_tokens >= 0,
                  "sequence {}: negative token counts ({} new, {} cached)", i, s.num_new_tokens,
                  s.num_cached_tokens);
    SPINDLE_CHECK(s.query_offset == expected_offset,
                  "sequence {}: query_offset {} but rows must be contiguous in batch order (expected {})",
                  i, s.query_offset, expected_offset);
    expected_offset += s.num_new_tokens;
    const int64_t total = int64_t{s.num_cached_tokens} + s.num_new_tokens;
    if (total == 0) continue;
    const int64_t num_table_pages = (total + page_size - 1) / page_size;
    SPINDLE_CHECK(page_tables != nullptr && s.page_table_offset >= 0, "sequence {}: no page table", i);
    SPINDLE_CHECK(s.num_pages >= num_table_pages,
                  "sequence {}: page table of {} pages cannot hold {} tokens (page size {})", i, s.num_pages, total,
                  page_size);
    for (int64_t j = 0; j < num_table_pages; ++j) {
      const int32_t page = page_tables[s.page_table_offset + j];
      SPINDLE_CHECK(page >= 0 && page < num_pages,
                    "sequence {}: page table entry {} is page {}, outside [0, {})", i, j, page,
                    num_pages);
    }
  }
  SPINDLE_CHECK(expected_offset == num_tokens, "batch has {} query rows but the sequences add up to {}",
                num_tokens, expected_offset);
}

void check_kv_scales(DType dtype, const float* k_scales, const float* v_scales, int num_kv_heads) {
  if (dtype != DType::kF8E4M3) return;
  SPINDLE_CHECK(k_scales != nullptr && v_scales != nullptr, "FP8 (fp8_e4m3) KV pages need their K and V scales");
  for (int h = 0; h < num_kv_heads; ++h) {
    SPINDLE_CHECK(std::isfinite(k_scales[h]) && k_scales[h] > 0.0f && std::isfinite(v_scales[h]) && v_scales[h] > 0.0f,
                  "FP8 KV scales of KV head {} must be positive and finite (k_scale {}, v_scale {})", h, k_scales[h],
                  v_scales[h]);
  }
}

void check_paged_attention_params(const PagedAttentionParams& p, int64_t num_tokens) {
  SPINDLE_CHECK(p.kv.dtype == DType::kF32 || p.kv.dtype == DType::kBF16 || p.kv.dtype == DType::kF16 ||
                    p.kv.dtype == DType::kF8E4M3,
                "KV dtype {} not supported by paged attention (f32, bf16, f16 or f8_e4m3)", dtype_name(p.kv.dtype));
  SPINDLE_CHECK(p.num_heads > 0 && p.kv.num_kv_heads > 0 && p.kv.head_dim > 0 && p.kv.page_size > 0,
                "attention sizes must be positive (heads {}, kv heads {}, head_dim {}, page_size {})",
                p.num_heads, p.kv.num_kv_heads, p.kv.head_dim, p.kv.page_size);
  SPINDLE_CHECK(p.num_heads % p.kv.num_kv_heads == 0, "num_heads {} is not a multiple of num_kv_heads {}",
                p.num_heads, p.kv.num_kv_heads);
  SPINDLE_CHECK(num_tokens == 0 || (p.q != nullptr && p.out != nullptr), "q/out missing");
  SPINDLE_CHECK(p.k_pages != nullptr && p.v_pages != nullptr, "KV pages not bound");
  // (Presence only: the scales may be device memory here; their values are checked where they are
  // set, kv::PagePool::set_kv_scales, and by the CPU writer.)
  check_kv_scales(p.kv.dtype, p.k_scales, p.v_scales, 0);
  check_sequences(p.sequences, p.page_tables, p.kv.page_size, p.kv.num_pages, num_tokens);
}

void check_optimized_attention_params(const PagedAttentionParams& p, int64_t num_tokens,
                                      const char* kernel_name) {
  check_paged_attention_params(p, num_tokens);
  SPINDLE_CHECK(p.kv.dtype == DType::kF32 || p.kv.dtype == DType::kBF16 || p.kv.dtype == DType::kF8E4M3,
                "{} attention supports f32, bf16 or f8_e4m3 KV (got {})", kernel_name, dtype_name(p.kv.dtype));
  SPINDLE_CHECK(cpu_attention_head_dim_supported(p.kv.head_dim),
                "{} attention needs head_dim to be a multiple of {} (got {})", kernel_name,
                kCpuAttentionHeadDimMultiple, p.kv.head_dim);
}

namespace {

// One token row [num_kv_heads, head_dim] to FP8: x / scale of its head, saturated (util/fp8.h).
void write_fp8_row(const float* src, const float* scales, int num_kv_heads, int head_dim, uint8_t* dst) {
  for (int h = 0; h < num_kv_heads; ++h) {
    const float scale = scales[h];
    for (int d = 0; d < head_dim; ++d) {
      const int64_t e = int64_t{h} * head_dim + d;
      dst[e] = float_to_fp8_e4m3(src[e] / scale);
    }
  }
}

}  // namespace

void write_kv_pages(const KvWriteParams& p) {
  check_kv_scales(p.kv.dtype, p.k_scales, p.v_scales, p.kv.num_kv_heads);
  const int64_t row = int64_t{p.kv.num_kv_heads} * p.kv.head_dim;  // elements per token
  const size_t elem = dtype_size(p.kv.dtype);
  auto* k_base = static_cast<std::byte*>(p.k_pages);
  auto* v_base = static_cast<std::byte*>(p.v_pages);
  for (const auto& s : p.sequences) {
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int64_t pos = int64_t{s.num_cached_tokens} + i;
      const int32_t page = p.page_tables[s.page_table_offset + pos / p.kv.page_size];
      const int64_t slot = int64_t{page} * p.kv.page_size + pos % p.kv.page_size;
      const float* k_src = p.k + (int64_t{s.query_offset} + i) * row;
      const float* v_src = p.v + (int64_t{s.query_offset} + i) * row;
      std::byte* k_dst = k_base + slot * row * elem;
      std::byte* v_dst = v_base + slot * row * elem;
      if (p.kv.dtype == DType::kF32) {
        std::memcpy(k_dst, k_src, row * sizeof(float));
        std::memcpy(v_dst, v_src, row * sizeof(float));
      } else if (p.kv.dtype == DType::kF8E4M3) {
        write_fp8_row(k_src, p.k_scales, p.kv.num_kv_heads, p.kv.head_dim, reinterpret_cast<uint8_t*>(k_dst));
        write_fp8_row(v_src, p.v_scales, p.kv.num_kv_heads, p.kv.head_dim, reinterpret_cast<uint8_t*>(v_dst));
      } else {
        auto* kd = reinterpret_cast<uint16_t*>(k_dst);
        auto* vd = reinterpret_cast<uint16_t*>(v_dst);
        const bool f16 = p.kv.dtype == DType::kF16;
        for (int64_t e = 0; e < row; ++e) {
          kd[e] = f16 ? float_to_fp16_bits(k_src[e]) : float_to_bf16_bits(k_src[e]);
          vd[e] = f16 ? float_to_fp16_bits(v_src[e]) : float_to_bf16_bits(v_src[e]);
        }
      }
    }
  }
}

}  // namespace spindle::kernels::cpu
