// Internal: the factories of the linear kernels (linear.cc, linear_onednn.cc), called by the
// registry (linear_registry.cc) after it has checked availability. They do not check CpuInfo.
#pragma once

#include <memory>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_onednn.h"

namespace spindle::kernels::cpu {

std::unique_ptr<LinearKernel> make_avx2_linear(const LinearWeight& weight);
std::unique_ptr<LinearKernel> make_avx512_linear(const LinearWeight& weight);
std::unique_ptr<LinearKernel> make_avx512_bf16_linear(const LinearWeight& weight);   // bf16 weights
// bf16_activations: x rounded to bf16 ("amx_bf16"); else split in three parts ("amx").
std::unique_ptr<LinearKernel> make_amx_linear(const LinearWeight& weight, bool bf16_activations);  // bf16 weights

}  // namespace spindle::kernels::cpu
