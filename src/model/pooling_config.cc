#include "model/pooling_config.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <vector>

#include "util/error.h"

namespace spindle {

namespace fs = std::filesystem;

std::string PoolingConfig::mode_name() const {
  switch (mode) {
    case Mode::kLastToken: return "lasttoken";
    case Mode::kMeanTokens: return "mean";
    case Mode::kClsToken: return "cls";
  }
  return "?";
}

namespace {

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  SPINDLE_CHECK(in.good(), "cannot read {}", path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  SPINDLE_CHECK(!j.is_discarded(), "{} is not valid JSON", path.string());
  return j;
}

}  // namespace

PoolingConfig read_pooling_config(const fs::path& model_dir) {
  PoolingConfig out;
  const fs::path modules_path = model_dir / "modules.json";
  if (!fs::is_directory(model_dir) || !fs::exists(modules_path)) return out;
  const nlohmann::json modules = read_json(modules_path);
  SPINDLE_CHECK(modules.is_array(), "{} must be an array of modules", modules_path.string());
  for (const auto& m : modules) {
    SPINDLE_CHECK(m.is_object() && m.value("type", nlohmann::json()).is_string(),
                  "{}: every module must be an object with a string 'type'", modules_path.string());
    if (m.at("type").get<std::string>() != "sentence_transformers.models.Pooling") continue;
    const nlohmann::json path = m.value("path", nlohmann::json());
    SPINDLE_CHECK(path.is_string(), "{}: the Pooling module has no string 'path'", modules_path.string());
    const fs::path config_path = model_dir / path.get<std::string>() / "config.json";
    const nlohmann::json c = read_json(config_path);
    SPINDLE_CHECK(c.is_object(), "{} must be a JSON object", config_path.string());
    std::vector<std::string> on;
    for (const auto& [key, value] : c.items()) {
      if (!key.starts_with("pooling_mode_")) continue;
      SPINDLE_CHECK(value.is_boolean(), "{}: '{}' must be a boolean", config_path.string(), key);
      if (value.get<bool>()) on.push_back(key);
    }
    SPINDLE_CHECK(on.size() == 1, "{}: exactly one pooling_mode_* must be true, got {}", config_path.string(),
                  on.size());
    if (on[0] == "pooling_mode_lasttoken") {
      out.mode = PoolingConfig::Mode::kLastToken;
    } else if (on[0] == "pooling_mode_mean_tokens") {
      out.mode = PoolingConfig::Mode::kMeanTokens;
    } else if (on[0] == "pooling_mode_cls_token") {
      out.mode = PoolingConfig::Mode::kClsToken;
    } else {
      SPINDLE_CHECK(false, "{}: '{}' is not supported (lasttoken, mean_tokens and cls_token are)", config_path.string(),
                    on[0]);
    }
    out.source = config_path.string();
    return out;
  }
  return out;
}

}  // namespace spindle
