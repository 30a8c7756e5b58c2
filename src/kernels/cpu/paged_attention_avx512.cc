#include "kernels/cpu/paged_attention.h"
namespace spindle::kernels::cpu {
void paged_attention_avx512(const PagedAttentionParams& p, bool use_bf16_dot) {}
}
