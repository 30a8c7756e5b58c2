#include "kv/kv_layout.h"

#include "util/error.h"

namespace spindle::kv {

uint64_t KvLayout::bytes_per_layer_page() const {
  return uint64_t(page_size) * uint64_t(num_kv_heads) * uint64_t(head_dim) * dtype_size(dtype);
}

uint64_t KvLayout::bytes_per_token() const {
  return uint64_t(num_layers) * 2 * uint64_t(num_kv_heads) * uint64_t(head_dim) * dtype_size(dtype);
}

uint64_t KvLayout::bytes_per_page() const { return bytes_per_token() * uint64_t(page_size); }

void KvLayout::check() const {
  SPINDLE_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && page_size > 0,
                "KV layout needs positive counts (got {} layers, {} KV heads, head_dim {}, page size {})",
                num_layers, num_kv_heads, head_dim, page_size);
  SPINDLE_CHECK(dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kF8E4M3,
                "KV cache dtype {} is not supported; use bf16, fp16, f32 or fp8_e4m3", kv_cache_dtype_name(dtype));
}

}  // namespace spindle::kv
