// The tokenizer.json "normalizer": applied to each piece of text between added tokens.
// Supported: null, Sequence, Prepend, Replace (String pattern), NFC (when built with ICU).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace spindle::tokenizer {

class Normalizer {
 public:
  // Throws spindle::Error naming tokenizer.json and the type for unsupported normalizers.
  static Normalizer from_json(const nlohmann::json& j);

  bool is_identity() const { return steps_.empty(); }
  // text is valid UTF-8; the result is too. continues_text: the piece continues a text mid-way
  // (Tokenizer::encode_continuation), so Prepend steps, which mark a piece's start, are skipped.
  std::string apply(std::string_view text, bool continues_text = false) const;

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace, kNfc } kind;
    std::string pattern;  // kReplace: the string replaced
    std::string content;  // kPrepend: the prefix; kReplace: the replacement
  };
  static void add_steps(const nlohmann::json& j, std::vector<Step>& steps);

  std::vector<Step> steps_;
};

// Returns prefix + text (kept out of line: GCC 12 warns falsely on string::insert(0, ...)).
std::string prepend(std::string_view prefix, std::string_view text);

// Replaces every occurrence of `from` (non-empty) in text by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace spindle::tokenizer
