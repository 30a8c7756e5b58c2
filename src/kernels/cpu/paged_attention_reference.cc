// The ground truth: one query row and head at a time, float64 everywhere.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "util/fp8.h"
#include "util/half.h"

namespace spindle::kernels::cpu {
namespace {

// Element `index` of the pages; FP8 bytes times `fp8_scale` (their head's scale).
double load(const void* pages, DType dtype, int64_t index, double fp8_scale) {
  if (dtype == DType::kF32) return static_cast<const float*>(pages)[index];
  if (dtype == DType::kF8E4M3) return fp8_e4m3_to_float(static_cast<const uint8_t*>(pages)[index]) * fp8_scale;
  if (dtype == DType::kF16) return fp16_bits_to_float(static_cast<const uint16_t*>(pages)[index]);
  return bf16_bits_to_float(static_cast<const uint16_t*>(pages)[index]);
}

}  // namespace

void paged_attention_reference(const PagedAttentionParams& p) {
  const int64_t num_tokens = count_query_rows(p.sequences);
  check_paged_attention_params(p, num_tokens);
  const int group = p.num_heads / p.kv.num_kv_heads;
  const int64_t kv_row = int64_t{p.kv.num_kv_heads} * p.kv.head_dim;
  const int page_size = p.kv.page_size;
  std::vector<double> scores, acc(p.kv.head_dim);
  for (const auto& s : p.sequences) {
    const int total = s.num_cached_tokens + s.num_new_tokens;
    for (int i = 0; i < s.num_new_tokens; ++i) {
      const int num_keys = p.causal ? s.num_cached_tokens + i + 1 : total;
      for (int h = 0; h < p.num_heads; ++h) {
        const int kvh = h / group;
        const bool fp8 = p.kv.dtype == DType::kF8E4M3;
        const double k_scale = fp8 ? p.k_scales[kvh] : 1.0;
        const double v_scale = fp8 ? p.v_scales[kvh] : 1.0;
        const float* q = p.q + ((int64_t{s.query_offset} + i) * p.num_heads + h) * p.kv.head_dim;
        scores.assign(num_keys, 0.0);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int t = 0; t < num_keys; ++t) {
          const int64_t slot = int64_t{p.page_tables[s.page_table_offset + t / page_size]} * page_size + t % page_size;
          const int64_t base = slot * kv_row + int64_t{kvh} * p.kv.head_dim;
          double dot = 0.0;
          for (int d = 0; d < p.kv.head_dim; ++d) dot += double{q[d]} * load(p.k_pages, p.kv.dtype, base + d, k_scale);
          scores[t] = dot * p.scale;
          max_score = std::max(max_score, scores[t]);
        }
        double sum = 0.0;
        for (double& x : scores) {
          x = std::exp(x - max_score);
          sum += x;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t = 0; t < num_keys; ++t) {
          const int64_t slot = int64_t{p.page_tables[s.page_table_offset + t / page_size]} * page_size + t % page_size;
          const int64_t base = slot * kv_row + int64_t{kvh} * p.kv.head_dim;
          for (int d = 0; d < p.kv.head_dim; ++d) acc[d] += scores[t] * load(p.v_pages, p.kv.dtype, base + d, v_scale);
        }
        float* out = p.out + ((int64_t{s.query_offset} + i) * p.num_heads + h) * p.kv.head_dim;
        for (int d = 0; d < p.kv.head_dim; ++d) out[d] = static_cast<float>(num_keys ? acc[d] / sum : 0.0);
      }
    }
  }
}

}  // namespace spindle::kernels::cpu
