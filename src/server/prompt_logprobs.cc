#include "server/prompt_logprobs.h"

#include "server/completion_handler.h"
#include "tokenizer/incremental_detokenizer.h"
#include "util/error.h"

namespace spindle::server {

using nlohmann::json;

namespace {

void check_entries(std::span<const TokenId> prompt, std::span<const engine::PromptLogprob> entries) {
  SPINDLE_CHECK(!prompt.empty() && entries.size() == prompt.size() - 1,
                "{} prompt logprobs for a prompt of {} tokens", entries.size(), prompt.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    SPINDLE_CHECK(entries[i].token == prompt[i + 1], "prompt logprob {} is of token {}, the prompt's is {}", i,
                  entries[i].token, prompt[i + 1]);
  }
}

}  // namespace

void append_echo_logprobs(const tokenizer::Tokenizer& tok, std::span<const TokenId> prompt,
                          std::span<const engine::PromptLogprob> entries, int k, json& logprobs) {
  check_entries(prompt, entries);
  tokenizer::IncrementalDetokenizer offsets(tok, /*skip_special_tokens=*/true);  // as the echoed text is decoded
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    logprobs["tokens"].push_back(logprob_token_text(tok, prompt[i]));
    logprobs["text_offset"].push_back(offset);
    if (i == 0) {
      logprobs["token_logprobs"].push_back(nullptr);
      logprobs["top_logprobs"].push_back(nullptr);
    } else {
      const engine::PromptLogprob& e = entries[i - 1];
      json top = json::object();
      for (size_t j = 0; j < e.top.size() && static_cast<int>(j) < k; ++j) {
        top[logprob_token_text(tok, e.top[j].token)] = e.top[j].logprob;
      }
      logprobs["token_logprobs"].push_back(e.logprob);
      logprobs["top_logprobs"].push_back(std::move(top));
    }
    offset += offsets.push(prompt[i]).size();
  }
}

json vllm_prompt_logprobs(const tokenizer::Tokenizer& tok, std::span<const TokenId> prompt,
                          std::span<const engine::PromptLogprob> entries, int k) {
  check_entries(prompt, entries);
  json out = json::array({nullptr});
  for (const engine::PromptLogprob& e : entries) {
    json d = json::object();
    d[std::to_string(e.token)] = {{"logprob", e.logprob}, {"rank", e.rank}, {"decoded_token", logprob_token_text(tok, e.token)}};
    int rank = 0;
    for (const auto& t : e.top) {
      if (++rank > k) break;
      if (t.token == e.token) continue;
      d[std::to_string(t.token)] = {{"logprob", t.logprob}, {"rank", rank}, {"decoded_token", logprob_token_text(tok, t.token)}};
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace spindle::server
