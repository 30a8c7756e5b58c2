// The shape of the KV cache: what one token and one page cost (DESIGN.md section 3).
#pragma once

#include <cstdint>

#include "util/dtype.h"

namespace spindle::kv {

// One rank's KV geometry. num_kv_heads is per tensor-parallel rank (max(1, kv_heads / tp_size));
// the caller builds it from the model (config/kv_config.h: kv_layout_for).
struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kBF16;  // bf16, f16, f32 or f8_e4m3 (1 byte per element, scaled: kernels/kv_scales.h)
  int page_size = 16;          // tokens per page

  // K and V of one token over all layers:
  //   num_layers * 2 * num_kv_heads * head_dim * dtype_size(dtype)
  uint64_t bytes_per_token() const;
  // bytes_per_token() * page_size: one page of every layer's K and V.
  uint64_t bytes_per_page() const;
  // One page of one layer's K (or V): page_size * num_kv_heads * head_dim * dtype_size(dtype).
  uint64_t bytes_per_layer_page() const;

  // Throws spindle::Error unless every count is positive and dtype is bf16, f16, f32 or f8_e4m3.
  void check() const;
};

}  // namespace spindle::kv
