// POST /v1/embeddings in OpenAI's shape:
//   {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...], "model", "encoding_format":
//    "float" | "base64", "dimensions": d, "user"}
//   -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [floats] or
//       base64 of little-endian float32}], "model", "usage": {"prompt_tokens", "total_tokens"}}
// Each input is its own engine request (SamplingParams::embedding: no token drawn), pooled as the
// model folder's sentence-transformers config says (model/pooling_config.h; else the last token),
// then L2-normalised; `dimensions` keeps the first d values and normalises again (Matryoshka, as
// sentence-transformers' truncate_dim). Text inputs are tokenized with the tokenizer's special
// tokens, as completions prompts are. Keys are checked against the request-field lists
// (request_fields.h, kEmbeddingsBody).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/request_stream.h"
#include "model/pooling_config.h"
#include "server/relay.h"
#include "util/token_id.h"

namespace spindle::engine {
class DpGroup;
}

namespace spindle::server {

// Inputs a request may hold (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  std::string model;
  // Each input: its text, or its token ids.
  std::vector<std::variant<std::string, std::vector<TokenId>>> inputs;
  bool base64 = false;
  int dimensions = 0;  // 0: the model's hidden size
};

// Throws ApiError (400 naming the parameter, 413 past max_body_bytes).
EmbeddingRequest parse_embedding_request(const std::string& body, size_t max_body_bytes);

// `pooled` L2-normalised after keeping its first `dimensions` values (0: all).
std::vector<float> normalized_embedding(std::span<const float> pooled, int dimensions);
// Base64 of the floats' little-endian bytes (what the openai client decodes by default).
std::string base64_floats(std::span<const float> values);

// Validates the request against the engine (model, vocabulary, context, dimensions), tokenizes and
// submits every input and returns the relay that answers it. Throws ApiError (400, 404; 503 when
// the queue is full or the engine is unhealthy).
std::unique_ptr<Relay> submit_embeddings(engine::DpGroup& engine, const EmbeddingRequest& request,
                                         const PoolingConfig& pooling);

class EmbeddingRelay : public Relay {
 public:
  EmbeddingRelay(engine::DpGroup& engine, const EmbeddingRequest& request,
                 std::vector<std::shared_ptr<engine::RequestStream>> streams, int num_prompt_tokens);

  bool streaming() const override { return false; }
  std::string take_events() override { return ""; }
  bool poll() override;
  nlohmann::json response() const override;

 private:
  std::string abort_events(const std::string& /*reason*/) override { return ""; }  // never streams

  engine::DpGroup& engine_;
  bool base64_;
  int dimensions_;
  std::vector<std::vector<float>> pooled_;  // per input, once finished
  std::string error_;
  int num_prompt_tokens_ = 0;
};

}  // namespace spindle::server
