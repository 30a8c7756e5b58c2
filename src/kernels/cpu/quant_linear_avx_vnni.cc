// Quantized linear kernel with AVX-VNNI (VEX vpdpbusd on 8 rows a vector); see
// quant_linear_avx2_impl.h. Compiled with -mavxvnni.
#include "kernels/cpu/quant_linear_avx2_impl.h"

namespace spindle::kernels::cpu {

void quant_linear_groups_avx_vnni(const QuantGroupsParams& p, int64_t group_begin, int64_t group_end) {
  groups_any<true>(p, group_begin, group_end);
}

}  // namespace spindle::kernels::cpu
