// The small ops of a transformer forward pass on a CUDA device: the device counterparts of
// kernels/cpu/ops.h with the same arithmetic (f32 activations; RMSNorm's sum of squares in f64;
// no FMA contraction where the CPU code has none), plus the conversions and bias add around the
// cuBLAS products (cublas_linear.h).
//
// Plain launch functions: every pointer is device memory of the current device, every launch
// is queued on `stream` and checked with CUDA_CHECK_LAUNCH (errors throw spindle::Error). Sizes
// are checked by the callers on the host. C++17 (included by .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace spindle::kernels::cuda {

// Element type of a weight on the device (the stored dtype of the checkpoint tensor).
enum class WeightType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// A second, 16-bit copy of an op's f32 output for the cuBLAS product that reads it next
// (CublasLinear::input16_target): out [rows, cols] contiguous, each value rounded as
// launch_f32_to_16bit rounds it (bf16 when `bf16`, else f16). out == nullptr: no copy. Writing it
// in the producing kernel saves the conversion launch before the product.
struct Out16 {
  void* out = nullptr;
  bool bf16 = true;
};

// out[i, :] = table[ids[i], :] as f32. table: [vocab, hidden] of `type`; ids: [num_ids], each
// in [0, vocab) (checked by the caller); out: [num_ids, hidden].
void launch_embedding_gather(const void* table, WeightType type, int64_t hidden, const int32_t* ids,
                             int64_t num_ids, float* out, cudaStream_t stream);

// RMSNorm over rows of `cols` elements, exactly kernels::cpu::rms_norm:
//   mean = float(sum_i double(x_i)^2 / cols);  inv = 1.0f / sqrtf(mean + eps);
//   out[r, i] = (x[r, i] * inv) * weight[i]
// Source row r is x + src * x_stride with src = row_index ? row_index[r] : r (a gather of the
// rows wanted); out row r is out + r * out_stride. out may equal x (then row_index must be null).
// weight: [cols] of weight_type.
// The sum of squares is taken in f64 in an order fixed by cols (not by rows or the batch), so the
// same row gives the same bits in any batch. out16: see Out16.
void launch_rms_norm(const float* x, int64_t x_stride, const int64_t* row_index, float* out,
                     int64_t out_stride, int64_t rows, int64_t cols, const void* weight,
                     WeightType weight_type, float eps, cudaStream_t stream, Out16 out16 = {});

// Rotary embedding in place on q [num_tokens, num_heads, head_dim] and k [num_tokens,
// num_kv_heads, head_dim] (contiguous rows), Hugging Face rotate_half: for i < half = head_dim / 2,
//   x[i] = x[i] * cos_i - x[i + half] * sin_i;  x[i + half] = x[i + half] * cos_i + x[i] * sin_i.
// positions: [num_tokens], >= 0. table: [table_positions, head_dim] f32, row p = cos(p f_i) for
// i < half then sin(p f_i) (kernels::cpu::RopeTable's values). Positions >= table_positions are
// computed as RopeTable does: angle = f32(inv_freq[i] * float(p)), cos/sin in f64 rounded to f32.
// inv_freq: [half].
void launch_rope(float* q, float* k, int64_t num_tokens, int num_heads, int num_kv_heads, int head_dim,
                 const int64_t* positions, const float* table, int64_t table_positions,
                 const float* inv_freq, cudaStream_t stream);

// out[r, i] = silu(gate[r, i]) * up[r, i] with silu(g) = g / (1 + expf(-g)); gate and up rows at
// r * in_stride; out [rows, cols] contiguous.
void launch_silu_mul(const float* gate, const float* up, int64_t in_stride, float* out, int64_t rows,
                     int64_t cols, cudaStream_t stream, Out16 out16 = {});

// hidden += delta, then out = RMSNorm(hidden) * weight, both [rows, cols] contiguous: exactly
// launch_add_inplace followed by launch_rms_norm (the same sums in the same order), one launch.
void launch_add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols,
                         const void* weight, WeightType weight_type, float eps, cudaStream_t stream,
                         Out16 out16 = {});

// The fused QKV product's rows qkv [num_tokens, (num_heads + 2 num_kv_heads) * head_dim] (q heads,
// then k heads, then v heads) split into q [num_tokens, num_heads, head_dim], k and v
// [num_tokens, num_kv_heads, head_dim]; q and k heads first RMSNorm'ed over head_dim when q_norm /
// k_norm are not null (Qwen3, as launch_rms_norm's per-row arithmetic), then rotated as
// launch_rope. One warp per (token, head). With kv.k_pages set it also writes each token's k
// (normed and rotated) and v heads into the KV pages (KvPagesOut), saving the write kernel.
struct KvPagesOut {
  enum Type : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
  void* k_pages = nullptr;  // [slots, num_kv_heads, head_dim] of kv_type; null: no write
  void* v_pages = nullptr;
  Type kv_type = kBF16;
  const int64_t* slots = nullptr;  // [num_tokens] device: the token's slot (page * page_size + offset), -1: none
};
void launch_split_qkv_norm_rope(const float* qkv, float* q, float* k, float* v, int64_t num_tokens, int num_heads,
                                int num_kv_heads, int head_dim, const void* q_norm, const void* k_norm,
                                WeightType norm_type, float eps, const int64_t* positions, const float* table,
                                int64_t table_positions, const float* inv_freq, cudaStream_t stream,
                                KvPagesOut kv = {});

// y[i] += x[i] for i < n.
void launch_add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream);

// y[r, j] += bias[j] for r < rows, j < cols.
void launch_add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// y[r, j] = (c[r, j] + c[rows + r, j]) (+ bias[j] when bias is not null): the two halves of a
// product over split activations (launch_split_to_16bit) summed. c: [2 * rows, cols].
void launch_sum_halves(const float* c, const float* bias, int64_t rows, int64_t cols, float* y,
                       cudaStream_t stream);

// x [n] f32 -> out [n] of type (kBF16 or kF16), round to nearest even (bf16 NaN kept quiet, the
// bits of util/half.h float_to_bf16_bits).
void launch_f32_to_16bit(const float* x, int64_t n, WeightType type, void* out, cudaStream_t stream);

// Splits x [rows, cols] f32 into two 16-bit matrices stacked in out [2 * rows, cols] of type:
//   hi = round(x), lo = round(x - hi)   (rows [0, rows) hi, rows [rows, 2 rows) lo)
// so hi + lo carries ~16 significant bits of x (f32 has 24, a single bf16 8).
void launch_split_to_16bit(const float* x, int64_t rows, int64_t cols, WeightType type, void* out,
                           cudaStream_t stream);

}  // namespace spindle::kernels::cuda
