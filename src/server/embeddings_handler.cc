#include "server/embeddings_handler.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/dp_group.h"
#include "server/openai_protocol.h"
#include "server/request_fields.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

std::vector<TokenId> token_ids(const json& array, const std::string& param) {
  std::vector<TokenId> ids;
  for (const auto& t : array) {
    const bool ok = t.is_number_unsigned() ? t.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                                           : t.is_number_integer() && t.get<int64_t>() >= 0 &&
                                                 t.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!ok) bad_request(param, fmt::format("'{}' holds {}, which is not a token id", param, t.dump()));
    ids.push_back(t.get<TokenId>());
  }
  return ids;
}

// "input": a string, an array of strings, an array of token ids, or an array of such arrays.
void parse_input(const json& input, EmbeddingRequest& r) {
  const auto empty = [] { bad_request("input", "'input' must not be empty"); };
  if (input.is_string()) {
    if (input.get<std::string>().empty()) empty();
    r.inputs.emplace_back(input.get<std::string>());
    return;
  }
  if (!input.is_array()) {
    bad_request("input", "'input' must be a string, an array of strings, an array of token ids or an array of them");
  }
  if (input.empty()) empty();
  if (input.size() > kMaxEmbeddingInputs) {
    bad_request("input", fmt::format("'input' holds {} inputs; at most {} are allowed", input.size(), kMaxEmbeddingInputs));
  }
  if (input[0].is_number()) {
    r.inputs.emplace_back(token_ids(input, "input"));
    return;
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string param = fmt::format("input[{}]", i);
    const json& x = input[i];
    if (x.is_string() && !x.get<std::string>().empty()) {
      r.inputs.emplace_back(x.get<std::string>());
    } else if (x.is_array() && !x.empty()) {
      r.inputs.emplace_back(token_ids(x, param));
    } else {
      bad_request(param, fmt::format("'{}' must be a non-empty string or a non-empty array of token ids", param));
    }
  }
}

// One input's tokens (text tokenized with the special tokens, as a completions prompt), checked
// against the vocabulary and the context.
std::vector<TokenId> input_tokens(const engine::DpGroup& engine, const std::variant<std::string, std::vector<TokenId>>& input,
                                  const std::string& param) {
  std::vector<TokenId> ids;
  if (const auto* text = std::get_if<std::string>(&input)) {
    try {
      ids = engine.tokenizer().encode(*text, /*add_special_tokens=*/true);
    } catch (const Error& e) {
      bad_request(param, e.message());
    }
  } else {
    ids = std::get<std::vector<TokenId>>(input);
  }
  if (ids.empty()) bad_request(param, fmt::format("'{}' has no tokens", param));
  for (const TokenId t : ids) {
    if (t >= engine.vocab_size()) bad_request(param, fmt::format("token id {} is outside the vocabulary", t));
  }
  if (static_cast<int>(ids.size()) >= engine.max_model_len()) {
    bad_request(param, fmt::format("'{}' has {} tokens; this model's context is {} tokens", param, ids.size(),
                                   engine.max_model_len()));
  }
  return ids;
}

}  // namespace

EmbeddingRequest parse_embedding_request(const std::string& body, size_t max_body_bytes) {
  const json j = parse_body(body, max_body_bytes);
  check_request_fields(kEmbeddingsBody, j, "");
  EmbeddingRequest r;
  if (auto it = j.find("model"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) bad_request("model", "'model' must be a string");
    r.model = it->get<std::string>();
  }
  if (auto it = j.find("user"); it != j.end() && !it->is_null() && !it->is_string()) {
    bad_request("user", "'user' must be a string");
  }
  auto input = j.find("input");
  if (input == j.end() || input->is_null()) bad_request("input", "'input' is required");
  parse_input(*input, r);
  if (auto it = j.find("encoding_format"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "float" && *it != "base64")) {
      bad_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    }
    r.base64 = *it == "base64";
  }
  if (auto it = j.find("dimensions"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 20)) {
      bad_request("dimensions", "'dimensions' must be a positive integer");
    }
    r.dimensions = it->get<int>();
  }
  return r;
}

std::vector<float> normalized_embedding(std::span<const float> pooled, int dimensions) {
  const size_t n = dimensions > 0 ? std::min(pooled.size(), static_cast<size_t>(dimensions)) : pooled.size();
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double{pooled[i]} * pooled[i];
  // As torch.nn.functional.normalize (sentence-transformers' Normalize): divided by max(norm, 1e-12).
  const double norm = std::max(std::sqrt(ss), 1e-12);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(pooled[i] / norm);
  return out;
}

std::string base64_floats(std::span<const float> values) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<uint8_t>(bits >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t{bytes[i]} << 16) | (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::unique_ptr<Relay> submit_embeddings(engine::DpGroup& engine, const EmbeddingRequest& r, const PoolingConfig& pooling) {
  if (std::string reason = engine.unhealthy_reason(); !reason.empty()) {
    throw ApiError(503, "server_unhealthy", "", "the server is unhealthy and must be restarted: " + reason);
  }
  if (!r.model.empty() && r.model != engine.model_name()) {
    throw ApiError(404, "invalid_request_error", "model",
                   fmt::format("the model '{}' does not exist; this server serves '{}'", r.model, engine.model_name()));
  }
  if (r.dimensions > engine.hidden_size()) {
    bad_request("dimensions", fmt::format("'dimensions' is {}; this model's embeddings have {}", r.dimensions,
                                          engine.hidden_size()));
  }
  std::vector<engine::Submission> batch;
  int num_tokens = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    engine::Submission& s = batch.emplace_back();
    s.prompt = input_tokens(engine, r.inputs[i], r.inputs.size() == 1 ? "input" : fmt::format("input[{}]", i));
    s.params.temperature = 0;
    s.params.max_tokens = 1;
    s.params.ignore_eos = true;
    s.params.embedding = true;
    s.params.pooling = pooling.mode;
    num_tokens += static_cast<int>(s.prompt.size());
  }
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  try {
    streams = engine.submit_batch(std::move(batch));
  } catch (const engine::EngineOverloaded& e) {
    throw ApiError(503, "server_overloaded", "", e.what());
  }
  return std::make_unique<EmbeddingRelay>(engine, r, std::move(streams), num_tokens);
}

EmbeddingRelay::EmbeddingRelay(engine::DpGroup& engine, const EmbeddingRequest& request,
                               std::vector<std::shared_ptr<engine::RequestStream>> streams, int num_prompt_tokens)
    : Relay(std::move(streams)),
      engine_(engine),
      base64_(request.base64),
      dimensions_(request.dimensions),
      pooled_(this->streams().size()),
      num_prompt_tokens_(num_prompt_tokens) {}

bool EmbeddingRelay::poll() {
  if (done_) return true;
  bool all = true;
  for (size_t i = 0; i < streams().size(); ++i) {
    engine::RequestOutput o;
    while (next_output(i, o)) {
      if (!o.finished) continue;
      set_finished(i);
      if (o.finish_reason == engine::FinishReason::kError || o.embedding.empty()) {
        error_ = fmt::format("input {}: {}", i, o.error.empty() ? "no embedding was computed" : o.error);
        cancel();
        done_ = true;
        return true;
      }
      pooled_[i] = std::move(o.embedding);
    }
    all = all && finished(i);
  }
  done_ = all;
  return done_;
}

json EmbeddingRelay::response() const {
  if (!error_.empty()) throw ApiError(500, "internal_error", "", "embedding failed: " + error_);
  json data = json::array();
  for (size_t i = 0; i < pooled_.size(); ++i) {
    const std::vector<float> e = normalized_embedding(pooled_[i], dimensions_);
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", base64_ ? json(base64_floats(e)) : json(e)}});
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", engine_.model_name()},
          {"usage", {{"prompt_tokens", num_prompt_tokens_}, {"total_tokens", num_prompt_tokens_}}}};
}

}  // namespace spindle::server
