#include "engine/sampling_params.h"

#include <cmath>

#include "util/error.h"

namespace spindle::engine {

void validate_sampling_params(const SamplingParams& p, int vocab_size) {
  SPINDLE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f,
                "temperature must be a number >= 0, got {}", p.temperature);
  SPINDLE_CHECK(p.top_k >= -1, "top_k must be -1, 0 (disabled) or a positive count, got {}", p.top_k);
  SPINDLE_CHECK(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f, "top_p must be in (0, 1], got {}",
                p.top_p);
  SPINDLE_CHECK(std::isfinite(p.min_p) && p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1], got {}",
                p.min_p);
  SPINDLE_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f,
                "repetition_penalty must be > 0, got {}", p.repetition_penalty);
  SPINDLE_CHECK(std::isfinite(p.presence_penalty) && std::fabs(p.presence_penalty) <= 2.0f,
                "presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  SPINDLE_CHECK(std::isfinite(p.frequency_penalty) && std::fabs(p.frequency_penalty) <= 2.0f,
                "frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  for (const auto& [token, bias] : p.logit_bias) {
    SPINDLE_CHECK(token >= 0 && token < vocab_size, "logit_bias token {} is outside the vocabulary [0, {})", token,
                  vocab_size);
    SPINDLE_CHECK(std::isfinite(bias) && std::fabs(bias) <= 100.0f, "logit_bias for token {} must be in [-100, 100], got {}",
                  token, bias);
  }
  for (int token : p.stop_token_ids) {
    SPINDLE_CHECK(token >= 0 && token < vocab_size, "stop_token_ids entry {} is outside the vocabulary [0, {})", token,
                  vocab_size);
  }
  for (const auto& s : p.stop) SPINDLE_CHECK(!s.empty(), "stop strings must not be empty");
  SPINDLE_CHECK(p.max_tokens >= 1, "max_tokens must be >= 1, got {}", p.max_tokens);
  SPINDLE_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= 20, "top_logprobs must be in [0, 20], got {}", p.top_logprobs);
  SPINDLE_CHECK(p.prompt_logprobs >= -1 && p.prompt_logprobs <= 20, "prompt_logprobs must be in [0, 20], got {}",
                p.prompt_logprobs);
}

}  // namespace spindle::engine
