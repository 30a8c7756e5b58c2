// Many-row products with FP8 E4M3 weights on Hopper's FP8 tensor cores through cuBLASLt (issue 47,
// the prefill half; W8A8): y [rows, out] = x [rows, in] . dequant(W)^T (+ bias), x and y f32, W
// e4m3 [out, in] with its f32 scales (gemv_fp8.h's modes), all in device memory.
//
// x is quantized on the device per token (fp8_activation.h), with the activation scale that pairs
// with the weight's (cuBLASLt's scale modes; A = W, op T; B = x^T, op N; D = y^T col-major, ld out):
//   weight kPerTensor   A OUTER_VEC_32F   x kPerToken    B OUTER_VEC_32F  (the weight's scale
//                       broadcast to `out` floats in a scratch, launch_broadcast_scale)
//   weight kPerChannel  A OUTER_VEC_32F   x kPerToken    B OUTER_VEC_32F
//   weight kBlock128    A BLK128x128_32F  x kPerToken128 B VEC128_32F
// (SCALAR_32F on both sides, the pairing for per-tensor weights, needs ONE activation scale
// for the whole batch: each request's precision would depend on the other requests' magnitudes in
// the step. Per-token scales keep every row's numerics its own.)
// The block mode reads the checkpoint's [ceil(out/128), ceil(in/128)] scales in place: cuBLASLt
// wants each row of block scales 16-byte aligned, so ceil(in/128) % 4 == 0 (and in % 128 == 0 for
// the activations' blocks); other shapes are unsupported (a reason, not a copy).
// Accumulation f32, D f32; where cuBLASLt has no f32-output algorithm for a mode (the heuristic
// finds none), D is bf16 in a scratch, widened to f32 with the bias (one more rounding, <= 2^-9 of
// |y|: output_bf16() says so). Otherwise the bias is added by a separate launch. fast_accum: cuBLASLt's
// FAST_ACCUM (no periodic promotion of the tensor cores' partial sums; faster, less exact): a
// second registry entry (fp8_linear_registry.h), chosen only by measurement.
//
// Error (tests/cuda/cuda_fp8_lt_test.cc derives it): against the float64 product of the SAME
// quantized operands the only error is the f32 (or, with fast accumulation, the tensor cores'
// ~f22) accumulation; against the unquantized x, each activation carries e4m3's 2^-4 relative
// rounding: that is W8A8's precision, stated per entry by the registry.
//
// Plans (descriptors, layouts and the heuristic's algorithm) are cached per (mode, out, in, rows).
// Needs SM 9.0 and cuBLASLt >= 12.9 (fp8_lt_unsupported_reasons). Not thread-safe; one stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_activation.h"
#include "kernels/cuda/fp8_linear.h"

namespace spindle::kernels::cuda {

// Why the cuBLASLt FP8 product cannot run a weight of this mode and shape on a device of compute
// capability cc_major.cc_minor (empty: it can). Loads cuBLASLt to read its version.
std::vector<std::string> fp8_lt_unsupported_reasons(int cc_major, int cc_minor, Fp8Scale mode, int64_t out,
                                                    int64_t in);

// The activation scale that pairs with a weight scale mode (the table above).
Fp8ActScale fp8_lt_activation_scale(Fp8Scale mode);

class Fp8LtLinear {
 public:
  // Creates the cuBLASLt handle (throws when cuBLASLt cannot be loaded) and its workspace.
  Fp8LtLinear(cudaStream_t stream, bool fast_accum);
  ~Fp8LtLinear();
  Fp8LtLinear(const Fp8LtLinear&) = delete;
  Fp8LtLinear& operator=(const Fp8LtLinear&) = delete;

  // Scratch for the quantized activations of up to max_rows x max_in, a per-tensor scale broadcast
  // to max_out floats, and a bf16 output of max_rows x max_out (the fallback above). Growing frees
  // the old buffers.
  void reserve(int64_t max_rows, int64_t max_in, int64_t max_out);

  // y = x . dequant(w)^T (+ bias [out] f32): x f32 [rows, w.in_features] quantized into the scratch.
  // Throws when the shape is unsupported (the reasons) or the scratch too small. Block-scaled weights
  // take any row count: cuBLASLt reads the activations' block scales with a leading dimension of
  // `rows` floats, which it needs 16-byte aligned (on an H100, cuBLASLt 13.1: 129 and 1025 rows
  // NOT_SUPPORTED, 64, 300 and 512 supported), so the rows past a multiple of kBlockRowAlign run as
  // one more product of kBlockRowAlign rows, zero-padded, through the tail scratch.
  void forward(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y, const float* bias);
  // The product alone over activations already quantized (codes [rows, in], scales in
  // fp8_lt_activation_scale(w.mode)'s layout): y = (dequant(codes) . dequant(W)^T) (+ bias).
  void forward_quantized(const DeviceFp8Weight& w, const uint8_t* x_codes, const float* x_scales, int64_t rows,
                         float* y, const float* bias);

  // "" when cuBLASLt has an algorithm for this product (planning it), else why not (its heuristic
  // found none: a scale mode, fast accumulation or output type this cuBLASLt lacks on this device).
  std::string why_unsupported(Fp8Scale mode, int64_t out, int64_t in, int64_t rows);
  static constexpr int64_t kBlockRowAlign = 4;
  // Whether products of this mode and shape write bf16 first (plans the product when not yet planned).
  bool output_bf16(Fp8Scale mode, int64_t out, int64_t in, int64_t rows);
  // "cublaslt_fp8" or "cublaslt_fp8_fast_accum".
  const char* name() const { return fast_accum_ ? "cublaslt_fp8_fast_accum" : "cublaslt_fp8"; }
  uint64_t workspace_bytes() const {
    return workspace_.size() + codes_.size() + scales_.size() + out16_.size() + wscale_.size() + query_scales_.size() +
           tail_x_.size() + tail_y_.size() + tail_codes_.size() + tail_scales_.size();
  }

 private:
  struct Plan;
  Plan& plan_for(Fp8Scale mode, int64_t out, int64_t in, int64_t rows);
  // Quantizes x [rows, in] into codes / scales, then forward_quantized.
  void quantize_and_multiply(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y, const float* bias,
                             DeviceBuffer& codes, DeviceBuffer& scales);

  void* handle_ = nullptr;  // cublasLtHandle_t
  cudaStream_t stream_ = nullptr;
  bool fast_accum_ = false;
  DeviceBuffer workspace_;
  DeviceBuffer codes_;   // e4m3 [max_rows, max_in]
  DeviceBuffer scales_;  // f32, the activations' scales
  DeviceBuffer out16_;   // bf16 [max_rows, max_out]: the bf16-output fallback
  DeviceBuffer wscale_;  // f32 [max_out]: a per-tensor weight scale broadcast
  // A block-scaled product's last rows padded to kBlockRowAlign (forward): x and y f32, codes, scales.
  DeviceBuffer tail_x_, tail_y_, tail_codes_, tail_scales_;
  DeviceBuffer query_scales_;  // 16 floats: the scale pointers the heuristic query needs set (their
                               // values are not read); each product sets its own before the matmul
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace spindle::kernels::cuda
