#include "attn/select/validation_cache.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "util/cache_file.h"
#include "util/switches.h"

namespace spindle::attn {
ValidationCache::ValidationCache(std::filesystem::path dir, std::string key) : key_(std::move(key)) {
  path_ = dir / fmt::format("attention-{:016x}.json", fnv1a_64(key_));
  load();
}

std::filesystem::path ValidationCache::default_dir() {
  const Switches& env = switches();
  if (!env.cache_dir.empty()) return env.cache_dir;
  if (env.xdg_cache_home && !env.xdg_cache_home->empty()) return std::filesystem::path(*env.xdg_cache_home) / "spindle";
  if (env.home && !env.home->empty()) return std::filesystem::path(*env.home) / ".cache" / "spindle";
  return std::filesystem::temp_directory_path() / "spindle-cache";
}

std::string ValidationCache::make_key(std::string_view build_id, std::string_view device_fingerprint,
                                      const attn::AttentionShape& shape) {
  return fmt::format("build={};device={};heads={};kv_heads={};head_dim={};scale={};kv_dtype={};page={}",
                     build_id, device_fingerprint, shape.num_heads, shape.num_kv_heads, shape.head_dim,
                     shape.scale, dtype_name(shape.kv_dtype), shape.page_size);
}

void ValidationCache::load() {
  const bool usable =
      read_keyed_outcomes(path_, key_, "backend cache", [&](const std::string& name, const nlohmann::json& o) {
        outcomes_[name] = attn::validation_outcome_from_json(o);
      });
  if (!usable) outcomes_.clear();
}

std::optional<attn::ValidationOutcome> ValidationCache::find(const std::string& backend, bool timing) const {
  const auto it = outcomes_.find(backend);
  if (it == outcomes_.end()) return std::nullopt;
  const bool timed = it->second.report.timed;
  if (timing && !timed && it->second.status == CheckStatus::kPass) return std::nullopt;
  return it->second;
}

void ValidationCache::store(const std::string& backend, const attn::ValidationOutcome& outcome) {
  if (check_status_cacheable(outcome.status)) outcomes_[backend] = outcome;
}

void ValidationCache::save() const {
  nlohmann::json outcomes = nlohmann::json::object();
  for (const auto& [name, outcome] : outcomes_) outcomes[name] = attn::to_json(outcome);
  write_keyed_outcomes(path_, key_, outcomes, "backend cache");
}

BackendValidator ValidationCache::wrap(BackendValidator inner) {
  return [this, inner = std::move(inner)](const std::string& backend, const attn::AttentionShape& shape,
                                          bool timing) {
    if (auto cached = find(backend, timing)) {
      ++num_hits_;
      return *cached;
    }
    ++num_misses_;
    auto outcome = inner(backend, shape, timing);
    store(backend, outcome);
    return outcome;
  };
}

}  // namespace spindle::attn
