#include "kernels/cpu/paged_attention.h"
namespace spindle::kernels::cpu {
void paged_attention_amx(const PagedAttentionParams& p) {}
}
