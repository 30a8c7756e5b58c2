#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "util/error.h"

namespace spindle::tokenizer {

TokenDecoder TokenDecoder::from_json(const nlohmann::json& j) {
  TokenDecoder d;
  if (j.is_null()) {
    d.join_with_space_ = true;
    return d;
  }
  d.add(j);
  return d;
}

void TokenDecoder::add(const nlohmann::json& j) {
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : j.at("decoders")) add(child);
  } else if (type == "ByteLevel") {
    byte_level_ = true;
  } else if (type == "Replace") {
    const auto& pattern = j.at("pattern");
    SPINDLE_CHECK(pattern.contains("String"),
                  "tokenizer.json: decoder Replace with a Regex pattern is not supported (String only)");
    std::string from = pattern.at("String").get<std::string>();
    SPINDLE_CHECK(!from.empty(), "tokenizer.json: decoder Replace has an empty pattern");
    replacements_.emplace_back(std::move(from), j.at("content").get<std::string>());
  } else if (type == "ByteFallback") {
    byte_fallback_ = true;
  } else if (type == "Fuse") {
    fused_ = true;
  } else if (type == "Strip") {
    // Strip acts per token; only after Fuse (one token left) is it a strip of the text start.
    SPINDLE_CHECK(fused_, "tokenizer.json: decoder Strip is only supported after Fuse");
    SPINDLE_CHECK(j.value("stop", 0) == 0, "tokenizer.json: decoder Strip with stop > 0 is not supported");
    strip_content_ = j.at("content").get<std::string>();
    strip_start_ = j.value("start", 0);
  } else if (type == "Metaspace") {
    const std::string replacement = j.value("replacement", "\u2581");
    replacements_.emplace_back(replacement, " ");
    bool prepends = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme")) prepends = j.at("prepend_scheme").get<std::string>() != "never";
    strip_start_ = prepends ? 1 : 0;  // strip_content_ is " " unless a Strip set it
  } else {
    SPINDLE_FAIL("tokenizer.json: decoder '{}' is not supported (supported: ByteLevel, Metaspace, and "
                 "Sequence of Replace, ByteFallback, Fuse, Strip)",
                 type);
  }
}

void TokenDecoder::append_token(std::string_view token, std::string& out) const {
  if (byte_fallback_) {
    if (const auto byte = parse_byte_token(token)) {
      out.push_back(static_cast<char>(*byte));
      return;
    }
  }
  std::string replaced;
  if (!replacements_.empty()) {
    replaced = std::string(token);
    for (const auto& [from, to] : replacements_) replaced = replace_all(replaced, from, to);
    token = replaced;
  }
  if (byte_level_) {
    byte_level_decode(token, out);
  } else {
    out.append(token);
  }
}

}  // namespace spindle::tokenizer
