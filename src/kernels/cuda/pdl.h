// Programmatic dependent launch (PDL, sm_90 and later), host side: whether launch_pdl (pdl.cuh)
// asks for it. On by default where the current device's compute capability is 9.0 or more;
// SPINDLE_CUDA_PDL=0 turns it off (A/B runs). Read once per process and device.
#pragma once

namespace spindle::kernels::cuda {

bool pdl_enabled();

}  // namespace spindle::kernels::cuda
