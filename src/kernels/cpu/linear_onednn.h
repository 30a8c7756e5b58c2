// Internal: the oneDNN-backed linear kernels (linear_onednn.cc), used by linear.cc.
#pragma once

#include <memory>
#include <string>

#include "kernels/cpu/linear.h"

namespace spindle::kernels::cpu {

// bf16_activations: oneDNN bf16 matmul with x rounded to bf16 (bf16 weights; AMX or
// AVX512-BF16). Otherwise f32 matmul; bf16 weights are widened block by block.
std::string onednn_linear_unsupported_reason(const LinearWeight& weight, bool bf16_activations);
std::unique_ptr<LinearKernel> make_onednn_linear(const LinearWeight& weight, bool bf16_activations);

}  // namespace spindle::kernels::cpu
