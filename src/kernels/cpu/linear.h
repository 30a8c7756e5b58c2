// Linear layers on the CPU: y = x . W^T (+ bias), activations f32, weights in their stored dtype.
//
// Weights are row-major [out_features, in_features], exactly as Hugging Face stores nn.Linear
// (and the embedding / LM head [vocab, hidden]). x is [m, in_features] f32, y is [m, out_features]
// f32, both row-major with the given leading dimensions (in elements).
//
// LinearKernel is created once per weight (prepacking, oneDNN primitives, ISA choice happen in
// the constructor or lazily per batch-size bucket) and reused for every forward.
#pragma once

#include <cstdint>
#include <memory>

#include "util/dtype.h"

namespace spindle {
class ThreadPool;
}

namespace spindle::kernels::cpu {

struct LinearWeight {
  const void* data = nullptr;  // [out_features, in_features] of dtype (kF32 or kBF16)
  DType dtype = DType::kBF16;
  int64_t out_features = 0;
  int64_t in_features = 0;
};

class LinearKernel {
 public:
  virtual ~LinearKernel() = default;
  // y[m, out] = x[m, in] . W^T + bias (bias: f32 [out] or null). Overwrites y.
  virtual void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias = nullptr) = 0;
  virtual const char* name() const = 0;
};

// The fastest correct implementation for this machine and weight (checked with CpuInfo).
std::unique_ptr<LinearKernel> make_linear_kernel(const LinearWeight& weight);
// Plain loops with double accumulation: the ground truth for tests.
std::unique_ptr<LinearKernel> make_reference_linear_kernel(const LinearWeight& weight);

}  // namespace spindle::kernels::cpu
