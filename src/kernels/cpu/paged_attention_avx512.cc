// Paged attention with AVX-512 (16 floats per vector); q.k with avx512_bf16 pair dot products
// when use_bf16_dot and the KV cache is bf16 (q rounded to bf16 once per task, f32 accumulation;
// P.V stays f32). FP8 KV: decode-sized tasks read the FP8 rows in the f32 micro-kernels (load16),
// prefill tasks convert each tile first. Algorithm and work split: see paged_attention_tiled.h.
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_avx512_isa.h"
#include "kernels/cpu/paged_attention_tiled.h"

namespace spindle::kernels::cpu {

void paged_attention_avx512(const PagedAttentionParams& p, bool use_bf16_dot) {
  check_optimized_attention_params(p, count_query_rows(p.sequences), "avx512");
  const Plan plan = make_plan(p, 32);
  run_plan(p, plan, [&](const Task& t, float* partials) { vector_task<Avx512>(p, t, partials, use_bf16_dot); });
}

}  // namespace spindle::kernels::cpu
