// Quantized linear kernel with AVX2 (maddubs / madd); see quant_linear_avx2_impl.h.
#include "kernels/cpu/quant_linear_avx2_impl.h"

namespace spindle::kernels::cpu {

void quant_linear_groups_avx2(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end) {
  groups_any<false>(p, group_begin, group_end);
}

}  // namespace spindle::kernels::cpu
