// Products with FP8 E4M3 weights on a CUDA device (issue 47, W8A16): y [rows, out] = x [rows, in]
// . dequant(W)^T (+ bias), x and y f32, W e4m3 [out, in] with its f32 scales (gemv_fp8.h's modes),
// all in device memory.
//
// x comes prepared for bf16 weights by CublasLinear::prepare (split hi + lo by default, rounded in
// the rounding mode), and then:
//   rows <= kGemvFp8MaxRows (and the gemv's alignment): launch_gemv_fp8 streams the FP8 weight
//     (1 byte per weight read). Split: the hi and lo rows run as 2 * rows rows of the gemv (one or
//     two launches of at most 8 rows) into scratch and y = hi + lo (+ bias) (launch_add_row_halves),
//     so the activations keep ~16 significant bits as the bf16 path's split does.
//   more rows: the interim path until the cuBLASLt FP8 GEMM (issue 47 item 2): the weight is
//     dequantized to bf16 into one scratch weight (launch_fp8_dequantize_bf16: one rounding to bf16
//     per weight, <= 2^-9 relative) and multiplied by CublasLinear's bf16 path. That reads and writes
//     the weight once more per product: correct, not fast.
// Not thread-safe; one stream (CublasLinear's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_fp8.h"

namespace spindle::kernels::cuda {

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

  // Scratch for FP8 weights of at most max_out outputs and max_elements weights. Call at load
  // (growing moves the buffers: captured graphs would point at freed memory).
  void reserve(int64_t max_out, int64_t max_elements);

  // y = x . dequant(w)^T (+ bias [out] f32); x prepared for DType::kBF16 with w.in_features columns.
  void forward(const DeviceFp8Weight& w, const CublasLinear::Input& x, float* y, const float* bias);

  uint64_t workspace_bytes() const { return product_.size() + dequantized_.size(); }

 private:
  CublasLinear& linear_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer product_;      // f32 [2 * kGemvFp8MaxRows, max_out]: split gemv rows
  DeviceBuffer dequantized_;  // bf16 [max_elements]: the many-row path's weight
};

}  // namespace spindle::kernels::cuda
