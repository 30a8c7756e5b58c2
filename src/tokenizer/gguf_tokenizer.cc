// Tokenizer::from_gguf: the tokenizer a GGUF file's metadata describes, encoding as llama.cpp
// does (its src/llama-vocab.cpp at github.com/unslothai/llama.cpp d32676d7 was the reference;
// tests compare with that snapshot's models/ggml-vocab-*.gguf.inp/.out).
//
// Keys read (all under tokenizer.): ggml.model ("gpt2" | "llama"), ggml.pre (gpt2 only),
// ggml.tokens, ggml.token_type, ggml.merges (gpt2), ggml.scores (llama), ggml.add_space_prefix,
// ggml.add_bos_token, ggml.add_eos_token, ggml.bos_token_id, ggml.eos_token_id,
// ggml.eot_token_id, ggml.eom_token_id, chat_template; and general.name (Phi-3's rstrip rule).
//
// Token types (llama.cpp's LLAMA_TOKEN_TYPE_*): 1 normal and 6 byte tokens decode through the
// model's decoder; 3 control and 2 unknown are special (matched in text only when parse_special,
// skipped by decode(skip_special_tokens)); 4 user-defined tokens always match in the text and
// decode as their literal text; 5 unused and 0 / other types decode to nothing. Special and
// user-defined tokens are cut out of the text longest first (MatchOrder::kLongestFirst).
//
// Deliberate differences from llama.cpp: a BPE file without bos/eos ids gets none (llama.cpp
// defaults both to id 11); an id key out of range is an error (llama.cpp warns and ignores it);
// decode never applies llama.cpp's clean_spaces rewriting (" ," -> ","), so decode(encode(t))
// gives t back.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

#include "gguf/gguf_file.h"
#include "gguf/gguf_metadata.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spindle::tokenizer {
namespace {

// llama.cpp's token types.
enum GgufTokenType : int64_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// One row of the pre-tokenizer table: the split regexes applied in order (each cuts every piece
// into matches and the gaps between them), whether a whole word found in the vocabulary skips
// the merges, and whether BOS is added when the file has no add_bos_token key.
struct PreTokenizerSpec {
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;
  bool add_bos = false;
};

// The regexes are llama.cpp's (its adapted forms of the models' tokenizer.json patterns: the
// (?i:'s|...) groups spelled as '[sS]..., deepseek-llm's \s+$ as \s+\z because PCRE2's $ also
// matches before a final newline, where std::regex's does not).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// deepseek-llm's letter class, deepseek-llm / deepseek-coder's CJK and Hangul ranges,
// deepseek-v3's CJK and kana, deepseek-llm's punctuation (escaped: several of these code points
// are canonical singletons that a text editor's NFC would silently rewrite).
constexpr std::string_view kDeepseekLlmLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+";
constexpr std::string_view kDeepseekCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
constexpr std::string_view kDeepseekV3Cjk = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
constexpr std::string_view kDeepseekLlmPunct = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";

const std::vector<PreTokenizerSpec>& pre_tokenizer_table() {
  static const std::vector<PreTokenizerSpec> table = {
      {{"default"},
       {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {kLlama3Regex}, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3Regex}},
      {{"deepseek-llm"},
       {"[\r\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, "\\s+\\z",
        kDeepseekCjk, "\\p{N}+"}},
      {{"deepseek-v3"},
       {R"(\p{N}{1,3})", kDeepseekV3Cjk,
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      {{"deepseek-coder"},
       {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Regex, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2Regex}},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {kGpt2Regex}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"}, {kQwen2Regex}},
      {{"qwen35"}, {kQwen35Regex}},
      {{"chatglm-bpe", "glm4"}, {kLlama3Regex}},
      {{"tekken"}, {kTekkenRegex}, true, true},
      {{"gpt-4o", "llama4"}, {kGpt4oRegex}},
  };
  return table;
}

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  for (const PreTokenizerSpec& spec : pre_tokenizer_table()) {
    if (std::find(spec.names.begin(), spec.names.end(), name) != spec.names.end()) return &spec;
  }
  return nullptr;
}

// tokenizer.json-shaped descriptions, so that the existing pre-tokenizer and decoder serve.
nlohmann::json split_pre_tokenizer_json(const PreTokenizerSpec& spec) {
  nlohmann::json steps = nlohmann::json::array();
  for (const std::string_view regex : spec.regexes) {
    steps.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", std::string(regex)}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
  }
  steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

nlohmann::json sentencepiece_decoder_json(bool strip_prefix_space) {
  nlohmann::json steps = nlohmann::json::array();
  steps.push_back({{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}});
  steps.push_back({{"type", "ByteFallback"}});
  steps.push_back({{"type", "Fuse"}});
  if (strip_prefix_space) {
    steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  return {{"type", "Sequence"}, {"decoders", steps}};
}

// Texts llama.cpp treats as end of generation wherever they are in the vocabulary.
constexpr std::array<std::string_view, 13> kEndOfGenerationTexts = {
    "<|eot_id|>",      "<|im_end|>",    "<|end|>",          "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>",    "<EOT>",            "_<EOT>",
    "<|end_of_text|>", "<|return|>",    "<|call|>",         "<end_of_utterance>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
};

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// tokenizer.ggml.tokens, every entry valid UTF-8; an empty entry is named "[EMPTY_<id>]" as
// llama.cpp does (the names live in `storage`).
std::vector<std::string_view> read_tokens(const gguf::Metadata& metadata, std::vector<std::string>& storage) {
  const std::string& source = metadata.source_name();
  auto tokens = metadata.find_string_array("tokenizer.ggml.tokens");
  SPINDLE_CHECK(tokens.has_value() && !tokens->empty(), "{}: metadata key 'tokenizer.ggml.tokens' is missing or empty",
                source);
  size_t empty = 0;
  for (const std::string_view token : *tokens) empty += token.empty();
  storage.reserve(empty);  // no reallocation: the views below point into it
  for (size_t i = 0; i < tokens->size(); ++i) {
    if ((*tokens)[i].empty()) (*tokens)[i] = storage.emplace_back(fmt::format("[EMPTY_{}]", i));
    if (find_invalid_utf8((*tokens)[i]) != kValidUtf8) {
      check_utf8((*tokens)[i], fmt::format("{}: tokenizer.ggml.tokens[{}]", source, i));
    }
  }
  return std::move(*tokens);
}

// The model-specific parts of a GGUF tokenizer.
struct GgufModel {
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<SpmModel> spm;
  PreTokenizer pre_tokenizer;
  TokenDecoder decoder;
  bool add_bos = false;  // when the file has no tokenizer.ggml.add_bos_token
  bool add_space_prefix = false;
};

GgufModel load_bpe(const gguf::Metadata& metadata, std::span<const std::string_view> tokens) {
  const std::string& source = metadata.source_name();
  const auto pre = metadata.find_string("tokenizer.ggml.pre");
  SPINDLE_CHECK(pre.has_value(),
                "{}: metadata key 'tokenizer.ggml.pre' is missing: a gpt2-type vocabulary needs its "
                "pre-tokenizer name (supported: {})",
                source, fmt::join(gguf_pre_tokenizer_names(), ", "));
  const PreTokenizerSpec* spec = find_pre_tokenizer(*pre);
  SPINDLE_CHECK(spec != nullptr, "{}: metadata key 'tokenizer.ggml.pre' = '{}' is not supported (supported: {})",
                source, *pre, fmt::join(gguf_pre_tokenizer_names(), ", "));
  const auto merges = metadata.find_string_array("tokenizer.ggml.merges");
  SPINDLE_CHECK(merges.has_value(),
                "{}: metadata key 'tokenizer.ggml.merges' is missing (needed by a gpt2-type vocabulary)", source);
  GgufModel m;
  m.bpe = std::make_unique<BpeModel>(BpeModel::from_vocab(tokens, *merges, spec->ignore_merges, source));
  m.pre_tokenizer = PreTokenizer::from_json(split_pre_tokenizer_json(*spec));
  m.decoder = TokenDecoder::from_json({{"type", "ByteLevel"}});
  m.add_bos = spec->add_bos;
  return m;
}

GgufModel load_spm(const gguf::Metadata& metadata, std::span<const std::string_view> tokens) {
  const std::string& source = metadata.source_name();
  std::vector<float> scores;
  if (const auto s = metadata.find_float_array("tokenizer.ggml.scores")) {
    SPINDLE_CHECK(s->size() >= tokens.size(), "{}: metadata key 'tokenizer.ggml.scores' has {} entries for {} tokens",
                  source, s->size(), tokens.size());
    scores.assign(s->begin(), s->end());
  }
  GgufModel m;
  m.spm = std::make_unique<SpmModel>(SpmModel::from_vocab(tokens, scores, source));
  m.add_space_prefix = metadata.find_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  m.decoder = TokenDecoder::from_json(sentencepiece_decoder_json(m.add_space_prefix));
  m.add_bos = true;
  return m;
}

}  // namespace

std::vector<std::string> gguf_pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const PreTokenizerSpec& spec : pre_tokenizer_table()) {
    for (const std::string_view name : spec.names) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Tokenizer Tokenizer::from_gguf(const gguf::GgufFile& file) { return from_gguf(file.metadata()); }

Tokenizer Tokenizer::from_gguf(const gguf::Metadata& metadata) {
  Tokenizer t;
  t.load_gguf(metadata);
  return t;
}

void Tokenizer::load_gguf(const gguf::Metadata& metadata) {
  const std::string& source = metadata.source_name();
  std::vector<std::string> empty_names;  // storage for read_tokens' "[EMPTY_<id>]" names
  const std::vector<std::string_view> tokens = read_tokens(metadata, empty_names);
  const std::string_view model = metadata.get_string("tokenizer.ggml.model");
  const bool is_spm = model == "llama";
  GgufModel parts;
  if (model == "gpt2") {
    parts = load_bpe(metadata, tokens);
  } else if (is_spm) {
    parts = load_spm(metadata, tokens);
  } else {
    SPINDLE_FAIL("{}: metadata key 'tokenizer.ggml.model' = '{}' is not supported (supported: gpt2 "
                 "(byte-level BPE), llama (SentencePiece))",
                 source, model);
  }
  model_ = std::move(parts.bpe);
  spm_ = std::move(parts.spm);
  pre_tokenizer_ = std::move(parts.pre_tokenizer);
  decoder_ = std::move(parts.decoder);
  spm_add_space_prefix_ = parts.add_space_prefix;
  id_to_token_.assign(tokens.begin(), tokens.end());
  set_gguf_token_types(metadata);
  set_gguf_special_ids(metadata, is_spm);

  if (metadata.find_bool("tokenizer.ggml.add_bos_token").value_or(parts.add_bos)) {
    SPINDLE_CHECK(bos_id_.has_value(), "{}: tokenizer.ggml.add_bos_token is set but there is no "
                  "tokenizer.ggml.bos_token_id", source);
    prefix_ids_.push_back(*bos_id_);
  }
  if (metadata.find_bool("tokenizer.ggml.add_eos_token").value_or(false)) {
    SPINDLE_CHECK(eos_id_.has_value(), "{}: tokenizer.ggml.add_eos_token is set but there is no "
                  "tokenizer.ggml.eos_token_id", source);
    suffix_ids_.push_back(*eos_id_);
  }
  chat_template_ = std::string(metadata.find_string("tokenizer.chat_template").value_or(""));
  if (!chat_template_.empty()) chat_template_source_ = fmt::format("{}: tokenizer.chat_template", source);
}

void Tokenizer::set_gguf_token_types(const gguf::Metadata& metadata) {
  const std::string& source = metadata.source_name();
  const size_t n = id_to_token_.size();
  std::vector<int64_t> types(n, kNormal);
  if (const auto t = metadata.find_int_array("tokenizer.ggml.token_type")) {
    SPINDLE_CHECK(t->size() >= n, "{}: metadata key 'tokenizer.ggml.token_type' has {} entries for {} tokens",
                  source, t->size(), n);
    types.assign(t->begin(), t->begin() + static_cast<std::ptrdiff_t>(n));
  }
  // Phi-3 (llama.cpp matches general.name): special tokens and </s> swallow whitespace on their
  // right, except <unk>, <s> and <|endoftext|>.
  const std::string name = lowercase(metadata.find_string("general.name").value_or(""));
  const bool phi3 = name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;

  kind_.assign(n, Kind::kModel);
  special_.assign(n, false);
  std::vector<AddedToken> added;
  for (size_t i = 0; i < n; ++i) {
    const int64_t type = types[i];
    if (type == kNormal || type == kByte) continue;
    if (type != kControl && type != kUnknown && type != kUserDefined) {
      kind_[i] = Kind::kNone;  // unused / undefined: llama.cpp decodes them to nothing
      continue;
    }
    kind_[i] = Kind::kAddedOnly;
    special_[i] = type != kUserDefined;
    AddedToken token;
    token.id = static_cast<TokenId>(i);
    token.content = id_to_token_[i];
    token.special = special_[i];
    if (phi3) {
      token.rstrip = token.content == "</s>" ||
                     (token.content != "<unk>" && token.content != "<s>" && token.content != "<|endoftext|>");
    }
    added.push_back(std::move(token));
  }
  added_ = AddedTokenMatcher(std::move(added), MatchOrder::kLongestFirst);
}

void Tokenizer::set_gguf_special_ids(const gguf::Metadata& metadata, bool is_spm) {
  const std::string& source = metadata.source_name();
  auto id_key = [&](std::string_view key, std::optional<TokenId> fallback) -> std::optional<TokenId> {
    const auto value = metadata.find_int(key);
    if (!value) return fallback && *fallback < vocab_size() ? fallback : std::nullopt;
    SPINDLE_CHECK(*value >= 0 && *value < vocab_size(), "{}: metadata key '{}' = {} is outside the vocabulary "
                  "(0..{})", source, key, *value, vocab_size() - 1);
    return static_cast<TokenId>(*value);
  };
  // SentencePiece files without the keys use <s> = 1 and </s> = 2, as llama.cpp does.
  bos_id_ = id_key("tokenizer.ggml.bos_token_id", is_spm ? std::optional<TokenId>(1) : std::nullopt);
  eos_id_ = id_key("tokenizer.ggml.eos_token_id", is_spm ? std::optional<TokenId>(2) : std::nullopt);
  eot_id_ = id_key("tokenizer.ggml.eot_token_id", std::nullopt);
  eom_id_ = id_key("tokenizer.ggml.eom_token_id", std::nullopt);
  if (bos_id_) bos_token_ = id_to_token_[static_cast<size_t>(*bos_id_)];
  if (eos_id_) eos_token_ = id_to_token_[static_cast<size_t>(*eos_id_)];

  auto add_stop = [&](std::optional<TokenId> id) {
    if (id && std::find(eos_ids_.begin(), eos_ids_.end(), *id) == eos_ids_.end()) eos_ids_.push_back(*id);
  };
  add_stop(eos_id_);
  add_stop(eot_id_);
  add_stop(eom_id_);
  for (const std::string_view text : kEndOfGenerationTexts) add_stop(token_to_id(text));
}

void Tokenizer::encode_spm(std::span<const Segment> segments, std::vector<TokenId>& ids,
                           bool starts_after_token) const {
  // llama.cpp: a text piece at the start or right after a special token gets a leading space.
  bool after_token = starts_after_token;
  std::string text;
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      after_token = true;
      continue;
    }
    text.clear();
    if (spm_add_space_prefix_ && after_token) text.push_back(' ');
    text.append(segment.text);
    spm_->encode(replace_all(text, " ", "\u2581"), ids);
    after_token = false;
  }
}

}  // namespace spindle::tokenizer
