#include "engine/stop_policy.h"

#include <algorithm>

namespace spindle::engine {

StopVerdict StopTokenPolicy::check_token(const Request& /*request*/, TokenId token) {
  for (TokenId id : ids_) {
    if (token == id) return {StopPoint::kBeforeText, FinishReason::kStop};
  }
  return {};
}

bool StopStringPolicy::filter_text(std::string& text) {
  StopMatcher::Result matched = matcher_.feed(text);
  text = std::move(matched.emit);
  return matched.stopped;
}

void StopStringPolicy::flush_text(std::string& text) { text += matcher_.flush(); }

StopVerdict LengthPolicy::check_token(const Request& request, TokenId /*token*/) {
  // Known tokens: a later step of the overlap schedule may have one pending already.
  if (static_cast<int>(request.output.size()) >= max_tokens_ || request.num_known_tokens() >= max_model_len_) {
    return {StopPoint::kAfterText, FinishReason::kLength};
  }
  return {};
}

std::vector<TokenId> stop_token_ids(std::span<const TokenId> tokenizer_eos_ids, std::span<const TokenId> model_eos_ids,
                                    bool ignore_eos, std::span<const TokenId> request_stop_ids) {
  std::vector<TokenId> ids;
  auto add = [&](std::span<const TokenId> more) {
    for (TokenId id : more) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  };
  if (!ignore_eos) {
    add(tokenizer_eos_ids);
    add(model_eos_ids);
  }
  add(request_stop_ids);
  return ids;
}

}  // namespace spindle::engine
