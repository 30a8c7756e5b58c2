#include "startup/workspace_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "util/cache_file.h"
#include "util/mapped_file.h"

namespace spindle::startup {

std::string cache_fingerprint(const config::ResolvedConfig& config, const DeviceInfo& device) {
  std::string fingerprint = device_fingerprint(device.cpu);
  if (config.device == attn::Device::kCuda && !device.cuda_devices.empty()) {
    const CudaDeviceInfo& gpu = device.cuda_devices.front();
    fingerprint += fmt::format("-{}-sm{}{}", gpu.name, gpu.cc_major, gpu.cc_minor);
  }
  return fingerprint;
}

namespace {

// The mixture of experts' sizes ("none" for a dense model).
std::string moe_key(const MoeConfig& moe) {
  if (!moe.enabled()) return "none";
  return fmt::format("{}x{}:{}:shared{}:norm{}:step{}:dense[{}]", moe.num_experts, moe.num_experts_per_tok,
                     moe.moe_intermediate_size, moe.shared_expert_intermediate_size, moe.norm_topk_prob,
                     moe.decoder_sparse_step, fmt::join(moe.mlp_only_layers, ","));
}

// The checkpoint's FP8 format ("none" when unquantized).
std::string fp8_key(const std::optional<Fp8Quantization>& fp8) {
  if (!fp8) return "none";
  return fmt::format("{}:{}:static_input{}:ignored[{}]", fp8->method, fp8_scale_mode_name(fp8->mode),
                     fp8->static_input_scale, fmt::join(fp8->ignored, ","));
}

}  // namespace

std::string workspace_cache_key(std::string_view build_id, std::string_view fingerprint, const ModelConfig& m,
                                const config::ResolvedConfig& c, const WorkspaceKeyExtras& x) {
  return fmt::format(
      "build={};device={};on={}:{};arch={};vocab={};hidden={};intermediate={};layers={};heads={};kv_heads={};"
      "head_dim={};positions={};tied={};bias={};qk_norm={};weights={};moe={};fp8_checkpoint={};"
      "max_num_batched_tokens={};max_model_len={};kv_dtype={};page={};bf16_activations={};quantization={};"
      "quantize_fp8={};fp8_prefill_kernel={};cuda_graph_max_bs={};weight_bytes={};attention={}+{}",
      build_id, fingerprint, attn::device_name(c.device), c.cuda_device, architecture_name(m.architecture),
      m.vocab_size, m.hidden_size, m.intermediate_size, m.num_hidden_layers, m.num_attention_heads,
      m.num_key_value_heads, m.head_dim, m.max_position_embeddings, m.tie_word_embeddings, m.attention_bias, m.qk_norm,
      dtype_name(m.torch_dtype), moe_key(m.moe), fp8_key(m.fp8), c.kv.max_num_batched_tokens, c.kv.max_model_len,
      dtype_name(c.kv_dtype), c.page_size, c.bf16_activations, weight_quantization_name(c.quantization),
      c.quantize_fp8, c.fp8_prefill_kernel, c.cuda_graph_max_bs, x.weight_bytes, x.prefill_backend, x.decode_backend);
}

WorkspaceCache::WorkspaceCache(const std::filesystem::path& dir, std::string key) : key_(std::move(key)) {
  path_ = dir / fmt::format("workspace-{:016x}.json", fnv1a_64(key_));
}

std::optional<uint64_t> WorkspaceCache::find(int num_tokens) const {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(read_text_file(path_));
    if (j.at("key").get<std::string>() != key_) {
      spdlog::warn("ignoring workspace cache {}: it belongs to another key", path_.string());
      return std::nullopt;
    }
    if (j.at("num_tokens").get<int>() != num_tokens) return std::nullopt;
    return j.at("workspace_bytes").get<uint64_t>();
  } catch (const std::exception& e) {
    spdlog::warn("ignoring corrupt workspace cache {}: {}", path_.string(), e.what());
    return std::nullopt;
  }
}

void WorkspaceCache::store(int num_tokens, uint64_t workspace_bytes) const {
  try {
    const nlohmann::json j = {{"key", key_}, {"num_tokens", num_tokens}, {"workspace_bytes", workspace_bytes}};
    write_file_atomically(path_, j.dump(2) + "\n");
  } catch (const std::exception& e) {
    spdlog::warn("could not write workspace cache {}: {}", path_.string(), e.what());
  }
}

WorkspaceProbe WorkspaceCache::wrap(WorkspaceProbe inner, bool* from_cache) const {
  return [this, inner = std::move(inner), from_cache](int num_tokens) {
    if (const auto cached = find(num_tokens)) {
      if (from_cache != nullptr) *from_cache = true;
      return *cached;
    }
    if (from_cache != nullptr) *from_cache = false;
    const uint64_t measured = inner(num_tokens);
    store(num_tokens, measured);
    return measured;
  };
}

}  // namespace spindle::startup
