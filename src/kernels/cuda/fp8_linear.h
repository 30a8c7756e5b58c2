// Products with FP8 E4M3 weights on a CUDA device (issue 47, W8A16): y [rows, out] = x [rows, in]
// . dequant(W)^T (+ bias), x and y f32, W e4m3 [out, in] with its f32 scales (gemv_fp8.h's modes),
// all in device memory.
//
// x comes prepared for bf16 weights by CublasLinear::prepare (split hi + lo by default, rounded in
// the rounding mode), and then (the decode products, each weight byte read once per launch):
//   rows <= kFp8GemvUseMaxRows (and the gemv's alignment): launch_gemv_fp8 (f32 FMA units).
//   rows <= kFp8StreamMaxRows: launch_gemv_fp8_mma (bf16 tensor cores, gemv_fp8.h).
//   Split: the hi and lo rows run as 2 * rows rows of the same kernel (launches of at most 8 / 32
//     rows) into scratch and y = hi + lo (+ bias) (launch_add_row_halves), so the activations
//     keep ~16 significant bits as the bf16 path's split does.
//   more rows: the weight is converted to bf16 without rounding it and multiplied by CublasLinear's
//     bf16 path (until the cuBLASLt FP8 GEMM of fp8_lt_linear.h is chosen by measurement):
//       kPerTensor, kPerChannel: the codes alone (launch_fp8_codes_bf16, exact), y = (x . codes^T)
//         * s + bias in f32 (launch_scale_columns): the scale never rounded to bf16.
//       kBlock128: the scale varies along `in`, so the f32 dequantized weight d is held as
//         hi + lo (launch_fp8_dequantize_bf16_split, |hi + lo - d| <= 2^-18 |d|) and
//         y = x . hi^T + x . lo^T (+ bias): twice the products, ~f32 accuracy.
//     (The former interim path rounded code * scale to bf16, 2^-9 per weight: on the H100 two of
//     nine long prefills of cuda_fp8_model_test missed 2e-2, bench/results/2026-12-07-h100-merged-checks.)
//     Each reads and writes the weight once more per product: correct, not fast.
// Not thread-safe; one stream (CublasLinear's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_fp8.h"

namespace spindle::kernels::cuda {

// Which decode product takes `rows` rows (above kFp8StreamMaxRows: the prefill path below, or the
// FP8 prefill entry CudaOps chose, fp8_linear_registry.h). kFp8GemvUseMaxRows: gemv_fp8 up to 3
// rows, the mma kernel from 4: bench_gemv_fp8 on an H200 (bench/results/2026-12-07-h100-fp8-moe,
// the H200 section), one 8B layer's products: 1 row 79 vs 114 us (gemv_fp8 vs mma), 3 rows 117 vs
// 116, 4 rows 145 vs 117, 8 rows 267 vs 118.
inline constexpr int64_t kFp8GemvUseMaxRows = 3;
static_assert(kFp8GemvUseMaxRows <= kGemvFp8MaxRows);
inline constexpr int64_t kFp8StreamMaxRows = kGemvFp8MmaMaxRows;

struct DeviceFp8Weight {
  const uint8_t* codes = nullptr;  // [out_features, in_features] e4m3
  const float* scales = nullptr;   // fp8_scale_count(mode, out, in) floats
  Fp8Scale mode = Fp8Scale::kPerTensor;
  int64_t out_features = 0;
  int64_t in_features = 0;
};

class Fp8Linear {
 public:
  Fp8Linear(CublasLinear& linear, cudaStream_t stream) : linear_(linear), stream_(stream) {}

  // Scratch for FP8 weights of at most max_out outputs and max_elements weights (twice that when
  // any weight has block scales: hi and lo), and the mma kernel's workspace (its counters zeroed
  // here). Call at load (growing moves the buffers: captured graphs would point at freed memory).
  void reserve(int64_t max_out, int64_t max_elements, bool has_block_scales = true);

  // y = x . dequant(w)^T (+ bias [out] f32); x prepared for DType::kBF16 with w.in_features columns.
  void forward(const DeviceFp8Weight& w, const CublasLinear::Input& x, float* y, const float* bias);

  uint64_t workspace_bytes() const { return product_.size() + dequantized_.size() + mma_buffer_.size(); }

 private:
  // The streaming products of rows <= kFp8StreamMaxRows (false: not this shape or alignment).
  bool forward_stream(const DeviceFp8Weight& w, const CublasLinear::Input& x, float* y, const float* bias);

  CublasLinear& linear_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer product_;      // f32 [2 * kFp8StreamMaxRows, max_out]: split rows (hi rows, lo rows)
  DeviceBuffer mma_buffer_;   // launch_gemv_fp8_mma's workspace (mma_)
  Fp8MmaWorkspace mma_;
  DeviceBuffer dequantized_;  // bf16 [max_elements] (codes, or hi), then [max_elements] (lo) for blocks
};

}  // namespace spindle::kernels::cuda
