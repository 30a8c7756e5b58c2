// Token ids read from tokenizer.json / generation_config.json: an integer in [0, kMaxTokenId),
// or spindle::Error naming what held it (a float, a string or a huge number is a bad file, not
// undefined behaviour; the bound keeps the id -> token table a sane size).
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "util/error.h"
#include "util/token_id.h"

namespace spindle::tokenizer {

inline constexpr int64_t kMaxTokenId = int64_t{1} << 22;  // 4M ids; real vocabularies hold <= 256k

inline TokenId token_id_from_json(const nlohmann::json& v, std::string_view what) {
  SPINDLE_CHECK(v.is_number_integer() || v.is_number_unsigned(), "{} must be an integer id, got {}",
                what, v.dump());
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() < static_cast<uint64_t>(kMaxTokenId)
                                               : v.get<int64_t>() >= 0 && v.get<int64_t>() < kMaxTokenId;
  SPINDLE_CHECK(in_range, "{} must be an id in [0, {}), got {}", what, kMaxTokenId, v.dump());
  return static_cast<TokenId>(v.get<int64_t>());
}

}  // namespace spindle::tokenizer
