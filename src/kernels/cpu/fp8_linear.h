// Linear layers with FP8 E4M3 weights on the CPU (issue 47, W8A16): y [m, out] = x [m, in] .
// dequant(W)^T (+ bias), x and y f32, W [out, in] e4m3 bytes row-major (util/fp8.h) read in place.
//
// Scales (dequant(W)[o, i] = fp8(W[o, i]) * s):
//   kPerTensor   s = scales[0]
//   kPerChannel  s = scales[o]
//   kBlock128    s = scales[(o / 128) * ceil(in / 128) + i / 128]
//
// The simplest correct kernel, until the linear-kernel registry gets ISA entries for FP8: the
// output rows are taken 16 at a time (tiles spread over the ThreadPool); each tile's weights are
// decoded to f32 with the scale applied (fp8 value * s rounded once to f32: exact for a BF16 or F16
// scale, within 2^-24 relative for an F32 one) into a per-thread buffer, then every row of x is
// multiplied with it, f32 products summed in 8 f32 partial sums per output. The activations are
// not quantized: a static input_scale of the checkpoint is not used. The decoded tile is reused
// for all m rows, so prefill decodes each weight once per call. Plain C++ (the compiler's
// vectorization of the baseline ISA): correct on every x86-64 CPU, not yet fast.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/cpu/linear.h"

namespace spindle::kernels::cpu {

enum class Fp8ScaleLayout { kPerTensor, kPerChannel, kBlock128 };

inline constexpr int64_t kFp8LinearBlock = 128;

// The caller owns `data` and `scales`, which outlive every kernel made of this descriptor.
struct Fp8LinearWeight {
  const uint8_t* data = nullptr;  // [out_features, in_features] e4m3
  int64_t out_features = 0;
  int64_t in_features = 0;
  Fp8ScaleLayout layout = Fp8ScaleLayout::kPerTensor;
  const float* scales = nullptr;  // 1, out_features, or ceil(out / 128) * ceil(in / 128) floats
};

// Its name is "fp8_reference". Throws spindle::Error for null pointers or non-positive sizes.
std::unique_ptr<LinearKernel> make_fp8_linear_kernel(const Fp8LinearWeight& weight);

// Row o of dequant(W) as f32 into out[0, in) (the kernel's decoding, for tests and other devices).
void fp8_dequantize_row(const Fp8LinearWeight& weight, int64_t o, float* out);

}  // namespace spindle::kernels::cpu
