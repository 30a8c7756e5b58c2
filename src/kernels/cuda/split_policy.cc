#include "kernels/cuda/split_policy.h"

#include "util/switches.h"

namespace spindle::kernels::cuda {

int flash_decode_min_chunk_keys() { return switches().flash_decode_min_chunk; }
int flash_decode_blocks_per_sm() { return switches().flash_decode_blocks_per_sm; }

}  // namespace spindle::kernels::cuda
