// The tokenizer.json "pre_tokenizer": cuts normalized text into words that BPE encodes
// independently. Supported: null (the whole text is one word), Sequence, Split (Regex or
// String pattern; Isolated, Removed, MergedWithPrevious, MergedWithNext; invert),
// ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern) and Metaspace
// (replacement, prepend_scheme first/always/never, split).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace spindle::tokenizer {

class PreTokenizer {
 public:
  // Throws spindle::Error naming tokenizer.json and the type for unsupported pre-tokenizers.
  static PreTokenizer from_json(const nlohmann::json& j);

  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends the words of text (valid UTF-8). at_text_start: text begins the whole input
  // (not after an added token); Metaspace's prepend_scheme "first" depends on it.
  // continues_text (with at_text_start): the input continues a text mid-way
  // (Tokenizer::encode_continuation), so its first piece gets no prefix at all (Metaspace's
  // "first" or "always" replacement, ByteLevel's add_prefix_space); later pieces as usual.
  void split(std::string_view text, bool at_text_start, std::vector<std::string>& words,
             bool continues_text = false) const;

  bool is_byte_level() const;

 private:
  struct Step;
  static void add_steps(const nlohmann::json& j, std::vector<Step>& steps);

  std::vector<Step> steps_;
};

}  // namespace spindle::tokenizer
