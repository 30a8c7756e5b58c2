// Linear layers on a CUDA device with cuBLAS: y[rows, out] = x[rows, in] . W^T (+ bias), x and y
// f32 row-major, W row-major [out, in] (nn.Linear's layout) in its stored dtype, all in device
// memory of the device that was current when the CublasLinear was made.
//
// f32 weights: cublasGemmEx in f32 with CUBLAS_COMPUTE_32F (no TF32).
// bf16 / f16 weights: cuBLAS multiplies 16-bit by 16-bit (f32 accumulation and output), so x is
// converted to the weight's type first, by default losslessly enough to keep f32 results:
//   split (default)  x = hi + lo with hi = round16(x), lo = round16(x - hi) (~16 significant bits)
//                    and y = W.hi + W.lo. Measured on the golden models (a CPU simulation with
//                    the same rounding): logits within ~2e-5 of Hugging Face and identical greedy
//                    continuations; one product with 2 * rows columns up to kFusedSplitMaxRows
//                    rows (decode: the weight is read once), two accumulating products above.
//   round            x = round16(x) only (allow_16bit_activations): half the prefill FLOPs, but
//                    ~1e-2 relative logit error on the golden models and greedy continuations
//                    that diverge where the top two logits are close.
// f16: activations beyond the f16 range (65504) become inf; bf16 has f32's range.
//
// One cuBLAS handle per CublasLinear, bound to one stream; its workspace is allocated up front.
// Not thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv16.h"
#include "kernels/cuda/model_ops.h"
#include "util/dtype.h"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace spindle::kernels::cuda {

// A weight in device memory: row-major [out_features, in_features] of dtype (kF32, kBF16, kF16).
struct DeviceWeight {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t out_features = 0;
  int64_t in_features = 0;
};

// In the rounding mode, products of at most kGemv16UseMaxRows rows over weights of at most
// kGemv16MaxWeightElements run on launch_gemv16 (gemv16.h) instead of cuBLAS. Measured on an H200
// with the 8B decode shapes, L2 cold (bench_gemv16, bench/results/2026-12-01-h200-gemv16): with one
// output row per warp gemv16 took 0.84-0.94x cuBLAS's time at 1 row (qkv, o, gate_up, down),
// 0.88-1.01x at 2, 0.93-1.07x at 4 and 1.5-2x at 8; on the LM head (525M elements) cuBLAS is as
// fast at 1 row and ahead beyond. With 2 output rows per warp where out > in (gemv16.h), gemv16
// is ahead at 3-4 rows too (qkv 19.6 vs 21.8 us, gate_up 66 vs 68-71, o 15.7-16.2 vs 17.5, down
// 39.5-41.1 vs 41.5), not at 5-8 (bench/results/2026-12-04-h200-gemv16-outs): a 5-row verify
// step took 5.87 ms with gemv16 against 5.31 with cuBLAS, batch-8 decode 7.24 against 5.09.
// (The former A/B switches SPINDLE_CUDA_GEMV16, SPINDLE_CUDA_GEMV16_MAX_ROWS and
// SPINDLE_CUDA_GEMV_MMA, and the gemv_mma kernel that lost, are listed in util/switches.cc.)
inline constexpr int64_t kGemv16UseMaxRows = 4;
inline constexpr int64_t kGemv16MaxWeightElements = int64_t{128} << 20;

// Split products of at most this many rows run as one product over the stacked [hi; lo] rows.
inline constexpr int64_t kFusedSplitMaxRows = 32;
// The cuBLAS workspace set on the handle (the size NVIDIA recommends for Hopper).
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

class CublasLinear {
 public:
  // Creates the handle on the current device, on `stream` (null: the legacy default stream).
  // small_batch_kernel = false: every product on cuBLAS, gemv16 never (bench_gemv16's baseline).
  explicit CublasLinear(cudaStream_t stream, bool allow_16bit_activations = false, bool small_batch_kernel = true);
  ~CublasLinear();
  CublasLinear(const CublasLinear&) = delete;
  CublasLinear& operator=(const CublasLinear&) = delete;

  // Grows the scratch for products of up to max_rows rows, max_in input and max_out output
  // features. Call before queuing work that uses the scratch: growing frees the old buffers.
  // prepare/forward never allocate; they throw when the scratch is too small.
  void reserve(int64_t max_rows, int64_t max_in, int64_t max_out);

  // x [rows, cols] f32 made ready for weights of `dtype`: f32 is used in place, 16-bit types are
  // converted (split or rounded) into the scratch. Valid until the next prepare(); several
  // weights of the same dtype and in_features may share one prepared input.
  struct Input {
    const float* x = nullptr;
    const void* converted = nullptr;  // 16-bit: [rows, cols], or [2 rows, cols] (hi rows, lo rows) when split
    DType dtype = DType::kF32;
    int64_t rows = 0;
    int64_t cols = 0;
    bool split = false;
  };
  Input prepare(const float* x, int64_t rows, int64_t cols, DType dtype);

  // Fusing the conversion into the op that produces x: in the rounding mode, the scratch where
  // prepare() would write x [rows, cols] rounded to 16 bits, for that op to write instead
  // (model_ops.h Out16); nullptr in the split mode or when the scratch is too small. adopt() then
  // makes the Input of x from what was written there, with no launch; it is valid until the
  // next prepare() (which overwrites the scratch).
  // In the rounding mode the scratch holds two inputs: slot 0 is where prepare() writes, slot 1 a
  // second place for a copy written while the product reading slot 0 still runs (forward_swiglu).
  void* input16_target(int64_t rows, int64_t cols, int slot = 0) const;
  // target: what input16_target returned for this x.
  Input adopt(const float* x, int64_t rows, int64_t cols, DType dtype, const void* target) const;

  // y [x.rows, w.out_features] = x . W^T (+ bias [w.out_features] f32, device). Overwrites y.
  // Throws when x was prepared for another dtype or width.
  void forward(const DeviceWeight& w, const Input& x, float* y, const float* bias = nullptr);
  // y [x.rows, w.out_features] += x . W^T for a 16-bit weight (no bias, never gemv16): the second
  // term of a weight held as two bf16 weights (fp8_linear.h's hi + lo).
  void accumulate(const DeviceWeight& w, const Input& x, float* y);
  // The joined [gate; up] product of a SwiGLU MLP (gate_up [2 im, in]) and its activation in one
  // launch (gemv16.h launch_gemv16_swiglu): act [x.rows, im], act16 its 16-bit copy (Out16), the
  // bits forward() + launch_silu_mul give. Only where gemv16 takes the product (rounding mode, at
  // most gemv16_fused_use_max_rows() rows, the weight within kGemv16MaxWeightElements); returns false
  // and does nothing otherwise.
  // act16.out must not overlap x.converted (take it from input16_target(rows, im, 1)).
  bool forward_swiglu(const DeviceWeight& gate_up, const Input& x, float* act, Out16 act16);
  // prepare() then forward().
  void forward(const DeviceWeight& w, const float* x, int64_t rows, float* y, const float* bias = nullptr);
  // Whether forward() runs a product of `rows` rows with w on gemv16 (given aligned operands).
  bool gemv16_takes(const DeviceWeight& w, int64_t rows) const;

  // "cublas_split" (default) or "cublas_round16".
  const char* name() const;
  // Device bytes: the cuBLAS workspace and the scratch.
  uint64_t workspace_bytes() const;

 private:
  // C[rows, out] (= beta * C) + x16_or_f32[rows, in] . W^T over n rows starting at b.
  void gemm(const DeviceWeight& w, const void* b, int64_t n, float* c, float beta);
  bool use_gemv16(const DeviceWeight& w, const Input& x) const;

  cublasContext* handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool round_ = false;
  bool gemv16_ = false;     // small-batch products on launch_gemv16 (rounding mode only)
  DeviceBuffer workspace_;  // cuBLAS's
  DeviceBuffer converted_;  // 16-bit activations, [2 * max_rows, max_in]: split hi/lo, or two rounded slots
  DeviceBuffer product_;    // f32 [2 * min(max_rows, kFusedSplitMaxRows), max_out]
};

}  // namespace spindle::kernels::cuda
