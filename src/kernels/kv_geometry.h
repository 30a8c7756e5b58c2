// KvGeometry: the shape of one DP rank's paged KV cache, the one value the layers above refer to
// (kv/ builds the pool from it, attn/ builds it at bind_kv_caches from AttentionShape::kv_geometry,
// attn::LayerKvCache carries the whole pool's, and the kernels' parameter structs, CPU and CUDA
// launch structs alike, carry the rank's). rank_page_range: the one formula for a DP rank's share
// of a pool. Plain data, C++17 (CUDA .cu files include it through kernels/cuda/paged_layer_launch.h).
//
// Layout, per layer: K and V arrays, each [num_pages, page_size, num_kv_heads, head_dim] of dtype;
// a DP rank owns the contiguous pages [first_page, first_page + num_pages) of the pool's arrays,
// and page tables hold rank-local ids [0, num_pages).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/dtype.h"

namespace spindle {

// Rank `rank` of `num_ranks` owns the pool's global pages [first, first + count):
// first = rank * num_pages / num_ranks (num_pages a multiple of num_ranks: every rank the same count).
struct PageRange {
  int first = 0;
  int count = 0;
};
inline PageRange rank_page_range(int num_pages, int num_ranks, int rank) {
  const auto first_of = [&](int r) { return static_cast<int>(int64_t{r} * num_pages / num_ranks); };
  PageRange range;
  range.first = first_of(rank);
  range.count = first_of(rank + 1) - range.first;
  return range;
}

struct KvGeometry {
  int num_layers = 0;
  int num_kv_heads = 0;        // per tensor-parallel rank
  int head_dim = 0;
  int page_size = 0;           // tokens per page
  DType dtype = DType::kBF16;  // bf16, f16, f32 or f8_e4m3 (scaled: kernels/kv_scales.h)
  int num_pages = 0;           // this rank's pages (page table ids [0, num_pages))
  int first_page = 0;          // the rank's first page in the pool's arrays

  // Whether pages of `other` are laid out as these (KV heads, head_dim, page size, dtype), whatever
  // the layer and page counts.
  bool same_page_layout(const KvGeometry& other) const {
    return num_kv_heads == other.num_kv_heads && head_dim == other.head_dim && page_size == other.page_size &&
           dtype == other.dtype;
  }
  // One page of one layer's K (or V): page_size * num_kv_heads * head_dim * dtype_size(dtype).
  uint64_t layer_page_bytes() const {
    return uint64_t(page_size) * uint64_t(num_kv_heads) * uint64_t(head_dim) * dtype_size(dtype);
  }
};

}  // namespace spindle
