// Programmatic dependent launch (PDL, sm_90 and later), host side: whether launch_pdl (pdl.cuh)
// asks for it. On by default where the current device's compute capability is 9.0 or more;
// SPINDLE_CUDA_PDL=0 turns it off (A/B runs). Read once per process and device.
#pragma once

namespace spindle::kernels::cuda {

bool pdl_enabled();

// Whether the kernels before a product at small batch (flash decode's split and merge, the f32 ->
// 16-bit conversion) let their successor launch before they wait (pdl_begin(true)) and flash
// decode copies K/V before its wait: pdl_enabled() and SPINDLE_CUDA_PDL_EARLY != 0 (A/B runs).
bool pdl_early_enabled();

}  // namespace spindle::kernels::cuda
