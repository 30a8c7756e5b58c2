#include "attn/attention_types.h"

#include <fmt/format.h>

namespace spindle::attn {

std::string_view device_name(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }
std::string_view phase_name(Phase phase) { return phase == Phase::kPrefill ? "prefill" : "decode"; }

std::string AttentionShape::to_string() const {
  return fmt::format("{}q/{}kv x {}, {} KV, page {}", num_heads, num_kv_heads, head_dim,
                     dtype_name(kv_dtype), page_size);
}

}  // namespace spindle::attn
