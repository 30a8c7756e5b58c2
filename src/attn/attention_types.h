// The vocabulary of attention backends (DESIGN.md section 2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kv_geometry.h"
#include "kernels/step_batch.h"
#include "util/dtype.h"

namespace spindle::attn {

enum class Device { kCpu, kCuda };
enum class Phase { kPrefill, kDecode };

std::string_view device_name(Device device);
std::string_view phase_name(Phase phase);

// The shape a backend is created for: one per model. GQA when num_kv_heads < num_heads.
struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;             // usually 1 / sqrt(head_dim)
  DType kv_dtype = DType::kBF16;
  int page_size = 16;

  std::string to_string() const;  // "32q/8kv x 128, bf16 KV, page 16"
  // The KV geometry of pages in this shape (kernels/kv_geometry.h): its KV heads, head_dim, page
  // size and dtype, with the layers and the page range given.
  KvGeometry kv_geometry(int num_layers, int num_pages, int first_page = 0) const {
    return {num_layers, num_kv_heads, head_dim, page_size, kv_dtype, num_pages, first_page};
  }
};

// The KV pool a backend sees is rank-local when dp_size > 1.
struct DpConfig {
  int dp_size = 1;
  int dp_rank = 0;
};

// One layer's KV pages: k_pages and v_pages are each [kv.num_pages, kv.page_size, kv.num_kv_heads,
// kv.head_dim] of kv.dtype, in the memory of `device` (host memory, or CUDA device memory of the
// device the calling thread has bound). kv is the whole pool's geometry (kernels/kv_geometry.h:
// kv.first_page 0, kv.num_pages every rank's pages). With data parallelism rank r owns the
// contiguous range rank_page_range(kv.num_pages, dp_size, r); page tables are rank-local.
// FP8 KV (kv.dtype kF8E4M3): k_scales and v_scales are the layer's [kv.num_kv_heads] dequantization
// scales (kernels/kv_scales.h), in the same memory as the pages; null for other dtypes.
struct LayerKvCache {
  void* k_pages = nullptr;
  void* v_pages = nullptr;
  KvGeometry kv;
  Device device = Device::kCpu;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
};

// f32 activations, row-major, in the memory of the backend's device (AttentionBackend::device()).
struct ConstTensor {
  const float* data = nullptr;
  int64_t rows = 0;  // tokens
  int64_t cols = 0;  // heads * head_dim
};
struct Tensor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// A layer's KV pages as an op outside the backend writes them: row r of the step's k/v goes to
// slot slots[r] (page * page_size + offset within this rank's pages; -1: a padding row, written
// nowhere), rounded to dtype as kernels::cpu::write_kv_pages rounds it.
struct KvWriteTarget {
  void* k_pages = nullptr;  // [pages, page_size, num_kv_heads, head_dim] of dtype, this rank's first page
  void* v_pages = nullptr;
  DType dtype = DType::kBF16;
  const float* k_scales = nullptr;  // FP8 KV: [num_kv_heads] (LayerKvCache), the backend's device memory
  const float* v_scales = nullptr;
  const int64_t* slots = nullptr;  // [num_tokens], the backend's device memory
  explicit operator bool() const { return k_pages != nullptr; }
};

// Where a backend may also write its output rounded to 16 bits (AttentionBackend::
// request_output_copy): [num_tokens, num_heads * head_dim] of dtype (kBF16 or kF16), rounded to
// nearest even as util/half.h rounds, in the backend's device memory.
struct OutputCopy {
  void* data = nullptr;
  DType dtype = DType::kBF16;
  explicit operator bool() const { return data != nullptr; }
};

}  // namespace spindle::attn
