// The tokenizer.json "decoder", compiled into a per-token byte transform plus a leading
// strip, so that whole-sequence decoding and streaming share one definition.
//
// Supported: ByteLevel; Sequence of Replace (String pattern), ByteFallback, Fuse,
// Strip (after Fuse, stop 0); Metaspace; null (tokens joined with " ", as HF does).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spindle::tokenizer {

class TokenDecoder {
 public:
  // Throws spindle::Error naming tokenizer.json and the type for unsupported decoders.
  static TokenDecoder from_json(const nlohmann::json& j);

  // Appends the raw bytes (maybe a partial UTF-8 sequence) of one vocabulary token.
  void append_token(std::string_view token, std::string& out) const;

  // At most this many leading copies of strip_content() are removed from the start of the
  // decoded text (SentencePiece's prefix space).
  int strip_start() const { return strip_start_; }
  const std::string& strip_content() const { return strip_content_; }
  // No decoder: tokens are separated by one space.
  bool join_with_space() const { return join_with_space_; }

 private:
  void add(const nlohmann::json& j);

  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fused_ = false;
  bool join_with_space_ = false;
  std::vector<std::pair<std::string, std::string>> replacements_;
  int strip_start_ = 0;
  std::string strip_content_ = " ";
};

}  // namespace spindle::tokenizer
