#include "startup/kv_scale_setup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attn/attention_backend.h"
#include "kv/page_pool.h"
#include "model/gguf_model_config.h"
#include "model/kv_scale_tensors.h"
#include "model/safetensors.h"
#include "startup/kv_planning.h"
#include "util/error.h"
#include "util/fp8.h"

namespace spindle::startup {

const char* const kCalibrationText =
    "The river runs past the old mill and under the stone bridge, where children fish in the summer. "
    "In 1887 the town council voted to widen the road; the work took three years and cost 4,200 pounds. "
    "Q: What is the capital of France? A: Paris. def add(a, b): return a + b";

namespace {

// max |x| over one KV head's elements of every token row in `pages` (f32 [tokens, kv_heads, head_dim]).
std::vector<float> head_absmax(const std::vector<std::byte>& pages, int64_t num_tokens, int num_kv_heads, int head_dim) {
  std::vector<float> absmax(static_cast<size_t>(num_kv_heads), 0.0f);
  const int64_t row = int64_t{num_kv_heads} * head_dim;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < num_kv_heads; ++h) {
      for (int d = 0; d < head_dim; ++d) {
        float x;
        std::memcpy(&x, pages.data() + sizeof(float) * static_cast<size_t>(t * row + int64_t{h} * head_dim + d),
                    sizeof(float));
        absmax[static_cast<size_t>(h)] = std::max(absmax[static_cast<size_t>(h)], std::fabs(x));
      }
    }
  }
  return absmax;
}

float scale_of(float absmax) {
  const float s = absmax / kFp8E4m3Max;
  return std::isfinite(s) && s > 0.0f ? s : 1.0f;
}

}  // namespace

KvScales calibrate_kv_scales(Transformer& model, std::span<const TokenId> prompt, int page_size, ThreadPool* pool) {
  SPINDLE_CHECK(!prompt.empty(), "the KV-scale calibration prompt has no tokens");
  const ModelConfig& config = model.config();
  const kv::KvLayout layout = kv_layout_for(config, DType::kF32, page_size);
  const int num_tokens = static_cast<int>(prompt.size());
  const int num_pages = (num_tokens + page_size - 1) / page_size;
  kv::PagePool scratch(layout, num_pages, 1, model.device());
  const attn::AttentionShape shape = model.attention_shape(DType::kF32, page_size);
  attn::BackendOptions options;
  options.pool = pool;
  auto backend = attn::create_attention_backend(model.device() == attn::Device::kCuda ? "cuda_reference" : "reference",
                                                shape, attn::DpConfig{}, options);
  const auto caches = scratch.layer_caches();
  backend->bind_kv_caches(caches);

  StepBatch batch;
  std::vector<int32_t> pages(static_cast<size_t>(num_pages));
  for (int i = 0; i < num_pages; ++i) pages[static_cast<size_t>(i)] = i;
  batch.add_sequence(prompt.data(), num_tokens, 0, pages.data(), num_pages, 1);
  const kernels::cuda::DeviceBatch* uploaded = model.upload(batch, page_size);
  backend->prepare(batch, uploaded);
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  model.forward(batch, *backend, logits.data());

  KvScales scales = KvScales::uniform(layout.num_layers, layout.num_kv_heads, 1.0f, "calibrated (absmax / 448)");
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (int which = 0; which < 2; ++which) {
      const auto bytes = scratch.copy_pages_to_host(layer, which == 1, 0, num_pages);
      const auto absmax = head_absmax(bytes, num_tokens, layout.num_kv_heads, layout.head_dim);
      float* dst = (which == 0 ? scales.k.data() : scales.v.data()) + static_cast<size_t>(layer) * layout.num_kv_heads;
      for (int h = 0; h < layout.num_kv_heads; ++h) dst[h] = scale_of(absmax[static_cast<size_t>(h)]);
    }
  }
  return scales;
}

KvScales choose_kv_scales(const std::filesystem::path& model_dir, bool calibrate, Transformer& model,
                          const tokenizer::Tokenizer& tokenizer, int page_size, ThreadPool* pool) {
  const ModelConfig& config = model.config();
  if (!is_gguf_path(model_dir)) {
    const Checkpoint checkpoint(model_dir);
    if (auto scales = read_checkpoint_kv_scales(checkpoint, config)) {
      if (calibrate) spdlog::info("fp8_e4m3 KV: the checkpoint's KV scales are used; --kv-cache-scales auto measures none");
      return *scales;
    }
  }
  const int num_kv_heads = model.attention_shape(DType::kF32, page_size).num_kv_heads;
  if (!calibrate) return KvScales::uniform(config.num_hidden_layers, num_kv_heads, 1.0f, "1.0 (default)");
  const std::vector<TokenId> prompt = tokenizer.encode(kCalibrationText);
  return calibrate_kv_scales(model, prompt, page_size, pool);
}

}  // namespace spindle::startup
