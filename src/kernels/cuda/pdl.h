// Programmatic dependent launch (PDL, sm_90 and later), host side: whether launch_pdl (pdl.cuh)
// asks for it: where the current device's compute capability is 9.0 or more (known once per
// process and device). The A/B verdicts that retired SPINDLE_CUDA_PDL and SPINDLE_CUDA_PDL_EARLY
// are in util/switches.cc.
#pragma once

namespace spindle::kernels::cuda {

bool pdl_enabled();
// Where it is on, the kernels before a product at small batch (flash decode's split and merge,
// the f32 -> 16-bit conversion) also let their successor launch before they wait
// (pdl_begin(true)) and flash decode copies K/V before its wait.

}  // namespace spindle::kernels::cuda
