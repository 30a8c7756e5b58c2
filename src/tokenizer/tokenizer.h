// A Hugging Face tokenizer (tokenizer.json, BPE models only) read from a model folder, or the
// tokenizer a GGUF file's metadata describes (from_gguf; see gguf_tokenizer.cc).
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
#include "tokenizer/spm.h"

namespace spindle::gguf {
class Metadata;
class GgufFile;
}

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
  // and generation_config.json (optional). Errors name the file. A path to a .gguf file
  // (rather than a folder) reads that file's tokenizer instead (from_gguf).
  static Tokenizer load(const std::filesystem::path& model_dir);
  // source names the folder in error messages.
  static Tokenizer from_files(const TokenizerFiles& files, std::string_view source = "tokenizer.json");
  // The tokenizer of a GGUF file (tokenizer.ggml.* and tokenizer.chat_template), encoding as
  // llama.cpp does: model "gpt2" (byte-level BPE, split regexes and ignore_merges chosen by
  // tokenizer.ggml.pre) or "llama" (SentencePiece scores, byte fallback, add_space_prefix).
  // An unknown or missing tokenizer.ggml.model / .pre, or malformed arrays, is a spindle::Error
  // naming the file and the key. Supported pre-tokenizer names: gguf_pre_tokenizer_names().
  static Tokenizer from_gguf(const gguf::Metadata& metadata);
  static Tokenizer from_gguf(const gguf::GgufFile& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // text must be valid UTF-8 (else spindle::Error "prompt is not valid UTF-8 at byte N").
  // add_special_tokens applies the post-processor (e.g. a BOS for Llama). A rendered chat
  // template already holds its BOS text, so encode it with add_special_tokens = false.
  // parse_special = false leaves the text of special (control) tokens as plain text
  // (llama.cpp's parse_special; non-special added / user-defined tokens still match).
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true,
                              bool parse_special = true) const;
  // The ids of `text` as it would be tokenized continuing a text mid-way, right after a piece that
  // was not an added token (jump-forward's guess at how the model's output goes on): no special
  // tokens added, control-token text left as text, and none of the start-of-text behaviour on its
  // first piece (a Prepend normalizer's "▁", Metaspace's prepend_scheme "first", SPM's dummy-prefix
  // space); pieces after an added token found in `text` start as in encode(). Valid UTF-8 required.
  std::vector<TokenId> encode_continuation(std::string_view text) const;
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
  // For a GGUF file: tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id, plus the
  // end-of-generation tokens llama.cpp recognises by their text (see gguf_tokenizer.cc).
  const std::vector<TokenId>& eos_ids() const { return eos_ids_; }
  // tokenizer.ggml.eot_token_id / eom_token_id of a GGUF file (nullopt when absent or out of
  // range, and for tokenizer.json folders).
  std::optional<TokenId> eot_id() const { return eot_id_; }
  std::optional<TokenId> eom_id() const { return eom_id_; }
  // Whether encode(..., add_special_tokens = true) prepends BOS / appends EOS.
  bool adds_bos() const { return !prefix_ids_.empty(); }
  bool adds_eos() const { return !suffix_ids_.empty(); }
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
  void load_gguf(const gguf::Metadata& metadata);
  void set_gguf_token_types(const gguf::Metadata& metadata);
  void set_gguf_special_ids(const gguf::Metadata& metadata, bool is_spm);
  // starts_after_token: the first piece starts the text or follows an added token (a dummy-prefix
  // space where the model adds one); false for encode_continuation.
  void encode_spm(std::span<const Segment> segments, std::vector<TokenId>& ids, bool starts_after_token = true) const;
  // The non-SPM pieces: normalizer, pre-tokenizer and model per segment; continuation as in
  // encode_continuation (the first segment continues a text).
  void encode_segments(std::span<const Segment> segments, std::vector<TokenId>& ids, bool continuation) const;

  enum class Kind : uint8_t { kNone, kModel, kAddedOnly };

  std::unique_ptr<BpeModel> model_;  // null for a SentencePiece GGUF vocabulary
  std::unique_ptr<SpmModel> spm_;    // GGUF tokenizer.ggml.model = "llama"
  bool spm_add_space_prefix_ = false;
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
  std::optional<TokenId> eos_id_;  // GGUF tokenizer.ggml.eos_token_id
  std::optional<TokenId> eot_id_;
  std::optional<TokenId> eom_id_;
  std::string bos_token_;
  std::string eos_token_;
  std::string chat_template_;
  std::string chat_template_source_;
  std::string tool_use_chat_template_;
};

// The tokenizer.ggml.pre names from_gguf accepts, sorted.
std::vector<std::string> gguf_pre_tokenizer_names();

}  // namespace spindle::tokenizer
