#include "kernels/fp8_prefill_cache.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/cache_file.h"

namespace spindle::kernels {

nlohmann::json to_json(const Fp8PrefillOutcome& o) {
  return {{"unsupported_reasons", o.unsupported_reasons},
          {"passed", o.passed},
          {"max_error", o.max_error},
          {"tolerance", o.tolerance},
          {"seconds", o.seconds},
          {"error", o.error}};
}

Fp8PrefillOutcome fp8_prefill_outcome_from_json(const nlohmann::json& j) {
  Fp8PrefillOutcome o;
  o.unsupported_reasons = j.at("unsupported_reasons").get<std::vector<std::string>>();
  o.passed = j.at("passed").get<bool>();
  o.max_error = j.at("max_error").get<double>();
  o.tolerance = j.at("tolerance").get<double>();
  o.seconds = j.at("seconds").get<double>();
  o.error = j.at("error").get<std::string>();
  return o;
}

Fp8PrefillCache::Fp8PrefillCache(std::filesystem::path dir, std::string key_prefix)
    : dir_(std::move(dir)), key_prefix_(std::move(key_prefix)) {}

std::string Fp8PrefillCache::make_key(std::string_view build_id, std::string_view device_fingerprint,
                                      std::string_view gpu, std::string_view library_versions, int64_t rows,
                                      int timing_reps) {
  return fmt::format("build={};device={};gpu={};libraries={};rows={};reps={}", build_id, device_fingerprint, gpu,
                     library_versions, rows, timing_reps);
}

std::string Fp8PrefillCache::shape_key(std::string_view shape) const {
  return key_prefix_ + ";shape=" + std::string(shape);
}

std::filesystem::path Fp8PrefillCache::path_for(std::string_view shape) const {
  return dir_ / fmt::format("fp8-prefill-{:016x}.json", fnv1a_64(shape_key(shape)));
}

bool Fp8PrefillCache::cacheable(const Fp8PrefillOutcome& o) {
  if (!o.error.empty()) return false;
  if (!o.unsupported_reasons.empty()) return true;
  return !o.passed || o.seconds > 0;
}

std::map<std::string, Fp8PrefillOutcome>& Fp8PrefillCache::outcomes(std::string_view shape) {
  if (auto it = loaded_.find(shape); it != loaded_.end()) return it->second;
  auto& map = loaded_[std::string(shape)];
  const bool usable = read_keyed_outcomes(path_for(shape), shape_key(shape), "FP8 prefill cache",
                                          [&](const std::string& name, const nlohmann::json& o) {
                                            map[name] = fp8_prefill_outcome_from_json(o);
                                          });
  if (!usable) map.clear();
  return map;
}

std::optional<Fp8PrefillOutcome> Fp8PrefillCache::find(std::string_view shape, const std::string& kernel) {
  const auto& map = outcomes(shape);
  const auto it = map.find(kernel);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

void Fp8PrefillCache::store(std::string_view shape, const std::string& kernel, const Fp8PrefillOutcome& outcome) {
  if (!cacheable(outcome)) return;
  auto& map = outcomes(shape);
  map[kernel] = outcome;
  nlohmann::json outcomes_json = nlohmann::json::object();
  for (const auto& [name, o] : map) outcomes_json[name] = to_json(o);
  write_keyed_outcomes(path_for(shape), shape_key(shape), outcomes_json, "FP8 prefill cache");
}

Fp8PrefillCheckFn Fp8PrefillCache::wrap(Fp8PrefillCheckFn inner) {
  return [this, inner = std::move(inner)](const std::string& kernel, const std::string& shape) {
    if (auto cached = find(shape, kernel)) {
      ++num_hits_;
      return *cached;
    }
    ++num_misses_;
    Fp8PrefillOutcome outcome = inner(kernel, shape);
    store(shape, kernel, outcome);
    return outcome;
  };
}

}  // namespace spindle::kernels
