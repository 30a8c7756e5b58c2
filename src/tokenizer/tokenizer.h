// A Hugging Face tokenizer (tokenizer.json, BPE models only) read from a model folder.
//
// Byte-level BPE (GPT-2, Llama-3, Qwen2) and SentencePiece-style BPE (Llama-2, Mistral:
// Prepend/Replace normalizer or Metaspace pre-tokenizer, byte fallback) are supported.
// encode() matches HF tokenizers' ids, including added/special tokens written in the text
// (they become their ids, as HF does by default). Thread-safe after load.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace spindle::tokenizer {

// The files of a model folder, already read. Everything but tokenizer_json may be empty.
struct TokenizerFiles {
  std::string tokenizer_json = {};
  std::string tokenizer_config_json = {};  // bos_token, eos_token, (older) chat_template
  std::string chat_template = {};          // chat_template.jinja (transformers >= 4.50 / 5)
  std::string generation_config_json = {}; // eos_token_id (int or list) adds to eos_ids()
};

class Tokenizer {
 public:
  // Reads model_dir/tokenizer.json (required), tokenizer_config.json, chat_template.jinja
  // and generation_config.json (optional). Errors name the file.
  static Tokenizer load(const std::filesystem::path& model_dir);
  // source names the folder in error messages.
  static Tokenizer from_files(const TokenizerFiles& files, std::string_view source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // text must be valid UTF-8 (else spindle::Error "prompt is not valid UTF-8 at byte N").
  // add_special_tokens applies the post-processor (e.g. a BOS for Llama). A rendered chat
  // template already holds its BOS text, so encode it with add_special_tokens = false.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true) const;
  // Unknown ids are skipped; invalid UTF-8 (e.g. a cut byte sequence) becomes U+FFFD.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = true) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The token's text as stored (byte-level or ▁ form); empty for unknown ids.
  const std::string& id_to_token(TokenId id) const;
  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  bool is_special(TokenId id) const;

  std::optional<TokenId> bos_id() const { return bos_id_; }
  // Ids that end generation: tokenizer_config eos_token plus generation_config eos_token_id.
  const std::vector<TokenId>& eos_ids() const { return eos_ids_; }
  const std::string& bos_token() const { return bos_token_; }  // "" when none
  const std::string& eos_token() const { return eos_token_; }  // "" when none
  // The model's chat template text (chat_template.jinja or tokenizer_config.json), or "".
  const std::string& chat_template() const { return chat_template_; }
  // Where chat_template() came from ("<dir>/chat_template.jinja", "tokenizer_config.json
  // chat_template"...), for error messages.
  const std::string& chat_template_source() const { return chat_template_source_; }
  // tokenizer_config.json's named template `tool_use`, or "".
  const std::string& tool_use_chat_template() const { return tool_use_chat_template_; }
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

  // Streaming support: appends the raw bytes id contributes to the decoded text (before
  // UTF-8 assembly and the decoder's leading strip). Used by IncrementalDetokenizer.
  void append_token_bytes(TokenId id, bool skip_special_tokens, std::string& out) const;
  const TokenDecoder& decoder() const { return decoder_; }

 private:
  Tokenizer();
  void parse_tokenizer_json(std::string_view text);
  void parse_post_processor(const nlohmann::json& j);
  void parse_config(const TokenizerFiles& files);

  enum class Kind : uint8_t { kNone, kModel, kAddedOnly };

  std::unique_ptr<BpeModel> model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  TokenDecoder decoder_;
  AddedTokenMatcher added_;
  std::vector<TokenId> prefix_ids_;  // post-processor: before the text
  std::vector<TokenId> suffix_ids_;  // post-processor: after the text
  std::vector<std::string> id_to_token_;
  std::vector<Kind> kind_;
  std::vector<bool> special_;
  StringMap<TokenId> added_ids_;
  std::optional<TokenId> bos_id_;
  std::vector<TokenId> eos_ids_;
  std::string bos_token_;
  std::string eos_token_;
  std::string chat_template_;
  std::string chat_template_source_;
  std::string tool_use_chat_template_;
};

}  // namespace spindle::tokenizer
