#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "attn/attention_backend.h"
#include "util/error.h"

namespace spindle::attn {

void AttentionRegistry::register_backend(BackendDescriptor descriptor) {
  SPINDLE_CHECK(!descriptor.name.empty(), "attention backend descriptor without a name");
  SPINDLE_CHECK(!contains(descriptor.name), "attention backend '{}' registered twice", descriptor.name);
  SPINDLE_CHECK(descriptor.factory && descriptor.unsupported_reasons,
                "attention backend '{}' lacks a factory or unsupported_reasons", descriptor.name);
  SPINDLE_CHECK(descriptor.phases != 0, "attention backend '{}' serves no phase", descriptor.name);
  descriptors_.push_back(std::move(descriptor));
}

bool AttentionRegistry::contains(std::string_view name) const {
  return std::any_of(descriptors_.begin(), descriptors_.end(),
                     [&](const BackendDescriptor& d) { return d.name == name; });
}

const BackendDescriptor& AttentionRegistry::get(std::string_view name) const {
  for (const auto& d : descriptors_) {
    if (d.name == name) return d;
  }
  SPINDLE_FAIL("unknown attention backend '{}'; registered backends: {}", name,
               fmt::join(names(), ", "));
}

std::vector<const BackendDescriptor*> AttentionRegistry::list() const {
  std::vector<const BackendDescriptor*> out;
  for (const auto& d : descriptors_) out.push_back(&d);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name < b->name; });
  return out;
}

std::vector<std::string> AttentionRegistry::names() const {
  std::vector<std::string> out;
  for (const auto* d : list()) out.push_back(d->name);
  return out;
}

AttentionRegistry& attention_registry() {
  static AttentionRegistry registry = [] {
    AttentionRegistry r;
    register_cpu_attention_backends(r);
#ifdef SPINDLE_WITH_CUDA
    register_cuda_attention_backends(r);
#endif
    return r;
  }();
  return registry;
}

std::unique_ptr<AttentionBackend> create_attention_backend(std::string_view name,
                                                           const AttentionShape& shape,
                                                           const DpConfig& dp_config,
                                                           const BackendOptions& options) {
  const BackendDescriptor& descriptor = attention_registry().get(name);
  SPINDLE_CHECK(dp_config.dp_size >= 1 && dp_config.dp_rank >= 0 &&
                    dp_config.dp_rank < dp_config.dp_size,
                "invalid data-parallel config: rank {} of {}", dp_config.dp_rank, dp_config.dp_size);
  SPINDLE_CHECK(shape.num_heads > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0 &&
                    shape.page_size > 0 && shape.num_heads % shape.num_kv_heads == 0,
                "invalid attention shape {}", shape.to_string());
  return descriptor.factory(shape, dp_config, options);
}

}  // namespace spindle::attn
