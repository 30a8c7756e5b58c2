// The small element-wise and row-wise ops of a transformer forward pass on the CPU.
//
// Activations are f32, row-major and contiguous unless a stride is given. Weights (embedding
// table, norm weights) are read in their stored dtype (kF32, kBF16 or kF16) without copies.
// Every op here is single-threaded over the rows it is given: callers split rows over a pool.
// Plain C++ written for the compiler to vectorise; all arithmetic is f32 (or f64 where stated),
// never rounded to 16 bits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/dtype.h"

namespace spindle::kernels::cpu {

// A weight vector or matrix in its stored dtype (kF32, kBF16 or kF16).
struct TypedWeight {
  const void* data = nullptr;
  DType dtype = DType::kF32;
};

// out[i, :] = table[ids[i], :] as f32. table: [vocab, hidden] of table.dtype; out: [ids.size(), hidden].
// Throws when an id is outside [0, vocab).
void embedding_gather(TypedWeight table, int64_t vocab, int64_t hidden, std::span<const int32_t> ids,
                      float* out);

// RMSNorm over each row of `cols` elements (Llama/Qwen/Mistral form, computed in f32 with the
// sum of squares accumulated in f64):
//   out[r, :] = (x[r, :] * 1 / sqrt(mean(x[r, :]^2) + eps)) * weight
// x and out: rows x cols, row r at x + r * x_stride (and out + r * out_stride); out may equal x.
// weight: [cols].
void rms_norm(const float* x, int64_t x_stride, float* out, int64_t out_stride, int64_t rows,
              int64_t cols, TypedWeight weight, float eps);

// Rotary position embedding, Hugging Face "rotate_half" convention: within each head of
// head_dim = 2h, element i pairs with i + h (i < h) and
//   out[i]     = x[i] * cos(p * f_i) - x[i + h] * sin(p * f_i)
//   out[i + h] = x[i + h] * cos(p * f_i) + x[i] * sin(p * f_i)
// with inverse frequencies f_i from the config (default / linear / llama3 scaling).
//
// The cos/sin table is precomputed for positions [0, num_positions); positions past it are
// computed on the fly with the same arithmetic, so results do not depend on the table size.
struct RopeParams {
  enum Scaling { kNone, kLinear, kLlama3 };
  int head_dim = 0;  // even
  double theta = 10000.0;
  Scaling scaling = kNone;
  double factor = 1.0;                       // kLinear, kLlama3
  double low_freq_factor = 1.0;              // kLlama3
  double high_freq_factor = 4.0;             // kLlama3
  int original_max_position_embeddings = 0;  // kLlama3
};

class RopeTable {
 public:
  RopeTable(const RopeParams& params, int64_t num_positions);

  int head_dim() const { return params_.head_dim; }
  int64_t num_positions() const { return num_positions_; }
  // The inverse frequencies f_i, i < head_dim / 2, as Hugging Face computes them (f32).
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Bytes of the cos/sin table.
  uint64_t table_bytes() const { return (cos_.size() + sin_.size()) * sizeof(float); }

  // Rotates `num_heads` heads of one token in place: x is [num_heads, head_dim].
  void apply(float* x, int num_heads, int64_t position) const;

 private:
  void angles(int64_t position, float* cos_out, float* sin_out) const;

  RopeParams params_;
  int64_t num_positions_ = 0;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  std::vector<float> cos_, sin_; // [num_positions, head_dim / 2]
};

// out[r, i] = silu(gate[r, i]) * up[r, i], silu(g) = g / (1 + exp(-g)), for r < rows, i < cols.
// gate and up rows start at gate + r * in_stride and up + r * in_stride; out rows are contiguous.
// On CPUs with AVX2+FMA (silu_mul_uses_avx2()) the exp is a vectorised polynomial (~1 ulp; exp's
// argument clamped to [-87.3, 88.7]); otherwise silu_mul_scalar (std::exp). Either way an
// element's value depends on its two inputs alone.
void silu_mul(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows,
              int64_t cols);
void silu_mul_scalar(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows, int64_t cols);
bool silu_mul_uses_avx2();

// y[i] += x[i] for i < n.
void add_inplace(float* y, const float* x, int64_t n);

}  // namespace spindle::kernels::cpu
