#include "attn/random_batch.h"

#include "attn/staged_batch.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "util/fp8.h"
#include "util/half.h"

namespace spindle::attn {

LayerKvCache RandomBatch::layer_cache() {
  LayerKvCache c;
  c.k_pages = k_pages.data();
  c.v_pages = v_pages.data();
  c.kv = shape.kv_geometry(/*num_layers=*/1, num_pages);
  if (!k_scales.empty()) {
    c.k_scales = k_scales.data();
    c.v_scales = v_scales.data();
  }
  return c;
}

namespace {

// scales: FP8 only, per KV head; elements are [.., num_kv_heads, head_dim].
void fill_pages_random(std::vector<std::byte>& pages, DType dtype, std::mt19937_64& rng,
                       const std::vector<float>& scales, int head_dim) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  if (dtype == DType::kF8E4M3) {
    const size_t heads = scales.size();
    for (size_t i = 0; i < pages.size(); ++i) {
      const float scale = scales[(i / static_cast<size_t>(head_dim)) % heads];
      pages[i] = static_cast<std::byte>(float_to_fp8_e4m3(dist(rng) / scale));
    }
  } else if (dtype == DType::kF32) {
    auto* p = reinterpret_cast<float*>(pages.data());
    for (size_t i = 0; i < pages.size() / sizeof(float); ++i) p[i] = dist(rng);
  } else if (dtype == DType::kF16) {
    auto* p = reinterpret_cast<uint16_t*>(pages.data());
    for (size_t i = 0; i < pages.size() / sizeof(uint16_t); ++i) p[i] = float_to_fp16_bits(dist(rng));
  } else {
    auto* p = reinterpret_cast<uint16_t*>(pages.data());
    for (size_t i = 0; i < pages.size() / sizeof(uint16_t); ++i) p[i] = float_to_bf16_bits(dist(rng));
  }
}

}  // namespace

RandomBatch make_random_batch(const AttentionShape& shape, const std::vector<SequenceSpec>& specs,
                              uint64_t seed, bool causal, int extra_pages) {
  RandomBatch b;
  b.shape = shape;

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);

  int num_used_pages = 0;
  for (const auto& s : specs) {
    num_used_pages += (s.num_cached_tokens + s.num_new_tokens + shape.page_size - 1) / shape.page_size;
  }
  b.num_pages = num_used_pages + extra_pages;
  std::vector<int32_t> ids(b.num_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  size_t next = 0;
  for (const auto& s : specs) {
    const int n = (s.num_cached_tokens + s.num_new_tokens + shape.page_size - 1) / shape.page_size;
    const std::vector<TokenId> tokens(static_cast<size_t>(s.num_new_tokens), 0);
    b.step.add_sequence(tokens.data(), s.num_new_tokens, s.num_cached_tokens, ids.data() + next, n,
                        s.num_new_tokens > 0 ? 1 : 0);
    next += n;
  }
  b.step.causal = causal;

  const size_t page_elems = size_t{static_cast<size_t>(shape.page_size)} * shape.num_kv_heads * shape.head_dim;
  b.k_pages.resize(page_elems * b.num_pages * dtype_size(shape.kv_dtype));
  b.v_pages.resize(b.k_pages.size());
  if (shape.kv_dtype == DType::kF8E4M3) {
    for (int h = 0; h < shape.num_kv_heads; ++h) b.k_scales.push_back((1.0f + 0.5f * static_cast<float>(h % 3)) / 448.0f);
    b.v_scales = b.k_scales;
    std::reverse(b.v_scales.begin(), b.v_scales.end());  // K and V scales differ too
  }
  fill_pages_random(b.k_pages, shape.kv_dtype, rng, b.k_scales, shape.head_dim);
  fill_pages_random(b.v_pages, shape.kv_dtype, rng, b.v_scales, shape.head_dim);

  const int64_t tokens = b.step.num_tokens();
  b.q.resize(tokens * b.q_cols());
  b.k.resize(tokens * b.kv_cols());
  b.v.resize(tokens * b.kv_cols());
  for (auto* vec : {&b.q, &b.k, &b.v}) {
    for (float& x : *vec) x = dist(rng);
  }
  return b;
}

std::vector<float> run_backend_once(AttentionBackend& backend, RandomBatch& batch) {
  StagedBatch staged(batch, backend.device());
  LayerKvCache cache = staged.layer_cache();
  backend.prepare(batch.step);
  backend.bind_kv_caches({&cache, 1});
  backend.forward(0, staged.q(), staged.k(), staged.v(), staged.out());
  staged.synchronize();
  staged.read_pages_back();
  return staged.read_out();
}

}  // namespace spindle::attn
