// The prompt's log-probabilities as clients read them (engine: SamplingParams::prompt_logprobs,
// RequestOutput::prompt_logprobs, one entry per prompt token after the first):
//   - completions' echo + logprobs (OpenAI): the prompt's own entries before the output's in
//     "logprobs": tokens, token_logprobs (the first null), top_logprobs (the first null, then the
//     k alternatives as {text: logprob}), text_offset (from 0, in the decoded prompt's bytes);
//   - vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...], each
//     dict holding the prompt token's own entry and its k alternatives (as vLLM's does).
#pragma once

#include <nlohmann/json.hpp>

#include <span>

#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

namespace spindle::server {

// Appends the prompt's entries to a completions "logprobs" object ({"tokens", "token_logprobs",
// "top_logprobs", "text_offset"}, arrays). entries: prompt.size() - 1 of them; at most k
// alternatives each.
void append_echo_logprobs(const tokenizer::Tokenizer& tokenizer, std::span<const TokenId> prompt,
                          std::span<const engine::PromptLogprob> entries, int k, nlohmann::json& logprobs);

// vLLM's prompt_logprobs array for the prompt (prompt.size() elements, the first null), at most k
// alternatives each.
nlohmann::json vllm_prompt_logprobs(const tokenizer::Tokenizer& tokenizer, std::span<const TokenId> prompt,
                                    std::span<const engine::PromptLogprob> entries, int k);

}  // namespace spindle::server
