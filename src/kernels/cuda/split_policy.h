// The registry's values that flash decode's split plan reads (util/switches.h, kind kMeasured:
// SPINDLE_FLASH_DECODE_MIN_CHUNK and SPINDLE_FLASH_DECODE_BLOCKS_PER_SM, declared until a
// start-time measurement per GPU sets them). A C++17 header for the .cu files; split_policy.cc
// reads switches() on every call (a plan is made per launch; graph replays make none).
#pragma once

namespace spindle::kernels::cuda {

int flash_decode_min_chunk_keys();    // keys; a multiple of 16 in [16, 1024] (the registry checks)
int flash_decode_blocks_per_sm();     // [1, 64]

}  // namespace spindle::kernels::cuda
