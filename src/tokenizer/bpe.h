// The tokenizer.json "model" of type BPE: vocabulary, ranked merges, byte fallback, unk.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/token_id.h"

namespace spindle::tokenizer {

using spindle::TokenId;  // util/token_id.h: one token id type everywhere

// Hash that lets unordered_map<std::string, V> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// The byte of a byte-fallback token "<0xNN>" (uppercase hex), or nullopt.
std::optional<unsigned char> parse_byte_token(std::string_view token);

class BpeModel {
 public:
  // j is tokenizer.json's "model". Throws spindle::Error (naming tokenizer.json) when the
  // type is not BPE, an option is unsupported, or a merge names unknown tokens.
  static BpeModel from_json(const nlohmann::json& j);

  // A byte-level BPE from a GGUF vocabulary (tokenizer.ggml.tokens / merges): tokens[i] has id
  // i (a text listed twice maps to its last id, as llama.cpp's token_to_id does); merges[r] is
  // "left right" of rank r. Merges whose sides or result are not tokens can never produce a
  // token and are skipped (llama.cpp would merge them and then emit their bytes; no vocabulary
  // tested holds one). ignore_merges: a whole word found in the vocabulary is one token.
  // source names the file in errors.
  static BpeModel from_vocab(std::span<const std::string_view> tokens,
                             std::span<const std::string_view> merges, bool ignore_merges,
                             std::string_view source);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;

  // Appends the ids of one pre-tokenized word (valid UTF-8). Characters missing from the
  // vocabulary become <0xNN> byte tokens (byte_fallback), else unk (fused when fuse_unk),
  // else are dropped, as HF tokenizers does. Thread-safe.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  // Tokens by id; ids without a model token are empty strings. Size is max id + 1.
  const std::vector<std::string>& tokens() const { return id_to_token_; }
  bool byte_fallback() const { return byte_fallback_; }
  // Merges skipped by from_vocab (see there).
  size_t skipped_merges() const { return skipped_merges_; }

 private:
  BpeModel() = default;
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;

  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  StringMap<TokenId> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<TokenId> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  TokenId byte_ids_[256] = {};  // valid when byte_fallback_ and has_all_bytes_
  bool has_all_bytes_ = false;
  size_t skipped_merges_ = 0;

  // Word -> ids cache for short words (long words, e.g. SentencePiece text without a
  // pre-tokenizer, are not cached). Cleared when it grows past kMaxCacheEntries.
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  static constexpr size_t kMaxCachedWordBytes = 128;
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<TokenId>> cache_;
};

}  // namespace spindle::tokenizer
