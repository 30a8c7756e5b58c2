#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "gguf/gguf_file.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/json_ids.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace spindle::tokenizer {
namespace {

// tokenizer_config.json writes tokens as "text" or {"content": "text", ...}.
std::string token_text(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return "";
}

// "chat_template" is a string, or a list of {"name", "template"} (the "default" one wins; with
// `name` = "tool_use", the named template of that name, or "").
std::string config_chat_template(const nlohmann::json& config, std::string_view name = "default") {
  if (!config.contains("chat_template")) return "";
  const auto& v = config.at("chat_template");
  if (v.is_string()) return name == "default" ? v.get<std::string>() : "";
  if (v.is_array()) {
    for (const auto& entry : v) {
      if (entry.is_object() && entry.value("name", "") == name) return entry.value("template", "");
    }
    if (!v.empty() && name == "default" && v.front().is_object()) return v.front().value("template", "");
  }
  return "";
}

std::string read_optional(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  return read_text_file(path);
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  std::error_code ec;
  if (model_dir.extension() == ".gguf" && std::filesystem::is_regular_file(model_dir, ec)) {
    return from_gguf(gguf::GgufFile(model_dir));
  }
  const std::filesystem::path json_path = model_dir / "tokenizer.json";
  SPINDLE_CHECK(std::filesystem::is_regular_file(json_path, ec),
                "{} not found: Spindle needs a Hugging Face tokenizer.json in the model folder",
                json_path.string());
  TokenizerFiles files;
  files.tokenizer_json = read_text_file(json_path);
  files.tokenizer_config_json = read_optional(model_dir / "tokenizer_config.json");
  files.chat_template = read_optional(model_dir / "chat_template.jinja");
  files.generation_config_json = read_optional(model_dir / "generation_config.json");
  return from_files(files, model_dir.string());
}

Tokenizer Tokenizer::from_files(const TokenizerFiles& files, std::string_view source) {
  Tokenizer t;
  try {
    t.parse_tokenizer_json(files.tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_FAIL("tokenizer.json in {} is malformed: {}", source, e.what());
  } catch (const Error& e) {
    SPINDLE_FAIL("{} (in {})", e.message(), source);
  }
  try {
    t.parse_config(files);
    if (!t.chat_template_source_.empty() && !source.empty())
      t.chat_template_source_ = fmt::format("{}/{}", source, t.chat_template_source_);
  } catch (const nlohmann::json::exception& e) {
    SPINDLE_FAIL("tokenizer_config.json or generation_config.json in {} is malformed: {}", source, e.what());
  }
  return t;
}

void Tokenizer::parse_tokenizer_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  SPINDLE_CHECK(j.is_object() && j.contains("model"), "tokenizer.json has no \"model\"");
  model_ = std::make_unique<BpeModel>(BpeModel::from_json(j.at("model")));
  normalizer_ = Normalizer::from_json(j.value("normalizer", nlohmann::json()));
  pre_tokenizer_ = PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()));
  decoder_ = TokenDecoder::from_json(j.value("decoder", nlohmann::json()));

  id_to_token_ = model_->tokens();
  kind_.assign(id_to_token_.size(), Kind::kModel);
  for (size_t i = 0; i < id_to_token_.size(); ++i) {
    if (id_to_token_[i].empty()) kind_[i] = Kind::kNone;
  }
  special_.assign(id_to_token_.size(), false);

  std::vector<AddedToken> added;
  for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
    AddedToken token;
    token.id = token_id_from_json(a.at("id"), "an added token's id");
    token.content = a.at("content").get<std::string>();
    token.special = a.value("special", false);
    token.lstrip = a.value("lstrip", false);
    token.rstrip = a.value("rstrip", false);
    token.single_word = a.value("single_word", false);
    token.normalized = a.value("normalized", false);
    SPINDLE_CHECK(token.id >= 0, "tokenizer.json: added token '{}' has negative id", token.content);
    check_utf8(token.content, "tokenizer.json: added token");
    const auto index = static_cast<size_t>(token.id);
    if (index >= id_to_token_.size()) {
      id_to_token_.resize(index + 1);
      kind_.resize(index + 1, Kind::kNone);
      special_.resize(index + 1, false);
    }
    if (kind_[index] != Kind::kModel) {
      id_to_token_[index] = token.content;
      kind_[index] = Kind::kAddedOnly;
    }
    // Byte-fallback tokens listed as special still decode (HF would drop them).
    special_[index] = token.special && !(model_->byte_fallback() && parse_byte_token(token.content));
    added_ids_[token.content] = token.id;
    added.push_back(std::move(token));
  }
  added_ = AddedTokenMatcher(std::move(added));
  parse_post_processor(j.value("post_processor", nlohmann::json()));
}

void Tokenizer::parse_post_processor(const nlohmann::json& j) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& child : j.at("processors")) parse_post_processor(child);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        SPINDLE_CHECK(item.at("Sequence").at("id").get<std::string>() == "A",
                      "tokenizer.json: TemplateProcessing single template must use $A");
        seen_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      SPINDLE_CHECK(j.at("special_tokens").contains(name),
                    "tokenizer.json: TemplateProcessing uses '{}' missing from its special_tokens", name);
      auto& target = seen_sequence ? suffix_ids_ : prefix_ids_;
      for (const auto& id : j.at("special_tokens").at(name).at("ids")) {
        target.push_back(token_id_from_json(id, "a TemplateProcessing special token id"));
      }
    }
  } else {
    SPINDLE_FAIL("tokenizer.json: post_processor '{}' is not supported (supported: null, ByteLevel, "
                 "TemplateProcessing, Sequence)",
                 type);
  }
}

void Tokenizer::parse_config(const TokenizerFiles& files) {
  chat_template_ = files.chat_template;
  if (!chat_template_.empty()) chat_template_source_ = "chat_template.jinja";
  if (!files.tokenizer_config_json.empty()) {
    const nlohmann::json config = nlohmann::json::parse(files.tokenizer_config_json);
    bos_token_ = token_text(config, "bos_token");
    eos_token_ = token_text(config, "eos_token");
    if (chat_template_.empty()) {
      chat_template_ = config_chat_template(config);
      if (!chat_template_.empty()) chat_template_source_ = "tokenizer_config.json chat_template";
    }
    tool_use_chat_template_ = config_chat_template(config, "tool_use");
  }
  if (!bos_token_.empty()) bos_id_ = token_to_id(bos_token_);
  if (!eos_token_.empty()) {
    if (const auto id = token_to_id(eos_token_)) eos_ids_.push_back(*id);
  }
  if (!files.generation_config_json.empty()) {
    const nlohmann::json gen = nlohmann::json::parse(files.generation_config_json);
    const auto eos = gen.value("eos_token_id", nlohmann::json());
    std::vector<TokenId> ids;
    if (eos.is_number()) ids.push_back(token_id_from_json(eos, "generation_config.json eos_token_id"));
    if (eos.is_array()) {
      for (const auto& id : eos) ids.push_back(token_id_from_json(id, "generation_config.json eos_token_id"));
    }
    for (const TokenId id : ids) {
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
    }
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                      bool parse_special) const {
  check_utf8(text, "prompt");
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 1);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  const std::vector<Segment> segments = added_.split(text, parse_special);
  if (spm_) {
    encode_spm(segments, ids);
  } else {
    encode_segments(segments, ids, /*continuation=*/false);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::vector<TokenId> Tokenizer::encode_continuation(std::string_view text) const {
  check_utf8(text, "text");
  std::vector<TokenId> ids;
  const std::vector<Segment> segments = added_.split(text, /*parse_special=*/false);
  if (spm_) {
    encode_spm(segments, ids, /*starts_after_token=*/false);
  } else {
    encode_segments(segments, ids, /*continuation=*/true);
  }
  return ids;
}

void Tokenizer::encode_segments(std::span<const Segment> segments, std::vector<TokenId>& ids,
                                bool continuation) const {
  std::vector<std::string> words;
  for (const Segment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    // The first piece starts the text; a continuation's first piece gets no start-of-text prefix
    // (later pieces follow an added token in both).
    const bool first = segment.offset == 0;
    const bool continues = continuation && first;
    words.clear();
    if (normalizer_.is_identity()) {
      pre_tokenizer_.split(segment.text, first, words, continues);
    } else {
      pre_tokenizer_.split(normalizer_.apply(segment.text, continues), first, words, continues);
    }
    for (const std::string& word : words) model_->encode_word(word, ids);
  }
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  IncrementalDetokenizer detokenizer(*this, skip_special_tokens);
  std::string out;
  for (const TokenId id : ids) detokenizer.push(id, out);
  detokenizer.finish(out);
  return out;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = added_ids_.find(token);
  if (it != added_ids_.end()) return it->second;
  return spm_ ? spm_->token_to_id(token) : model_->token_to_id(token);
}

const std::string& Tokenizer::id_to_token(TokenId id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocab_size()) return kEmpty;
  return id_to_token_[static_cast<size_t>(id)];
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
}

void Tokenizer::append_token_bytes(TokenId id, bool skip_special_tokens, std::string& out) const {
  if (id < 0 || id >= vocab_size()) return;
  const auto index = static_cast<size_t>(id);
  if (skip_special_tokens && special_[index]) return;
  switch (kind_[index]) {
    case Kind::kNone:
      return;
    case Kind::kAddedOnly:  // added tokens are literal text
      out.append(id_to_token_[index]);
      return;
    case Kind::kModel:
      decoder_.append_token(id_to_token_[index], out);
      return;
  }
}

}  // namespace spindle::tokenizer
