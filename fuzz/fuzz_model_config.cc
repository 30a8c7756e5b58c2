// libFuzzer target: config.json bytes -> nlohmann parse (no exceptions) -> parse_model_config,
// then the arithmetic derived from a parsed config.
// Contract under test: a bad config throws spindle::Error (naming the field); an nlohmann
// exception escaping parse_model_config would mean an unnamed type error reaches the user, so it
// is caught here and reported as a crash rather than silently accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "model/weight_map.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* text = reinterpret_cast<const char*>(data);
  const nlohmann::json json = nlohmann::json::parse(text, text + size, nullptr,
                                                    /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  try {
    const spindle::ModelConfig config = spindle::parse_model_config(json, "config.json");
    if (config.num_attention_heads % config.num_key_value_heads != 0) std::abort();
    if (config.head_dim <= 0 || config.head_dim % 2 != 0) std::abort();
    (void)spindle::kv_bytes_per_token(config, spindle::DType::kBF16, 1);
    (void)spindle::kv_bytes_per_token(config, spindle::DType::kF8E4M3, 8);
    (void)spindle::parameter_count(config);
  } catch (const spindle::Error&) {
    // Rejected config: expected.
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "nlohmann exception escaped parse_model_config: %s\n", e.what());
    std::abort();
  }
  return 0;
}
