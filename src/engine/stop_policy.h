// Why a request ends: a per-request list of stop policies that OutputProcessor::accept_token asks
// about every accepted token (output_processor.h decides finishing there, and only there).
//
// A policy may end a request at three points of a token's way to the client:
//   - before its text (check_token -> kBeforeText): the token ends the request and its text is
//     not emitted (an end-of-sequence id, a stop token id);
//   - within its text (filter_text): the text is cut where a stop string starts, and what follows
//     is never emitted; a policy may also hold back a tail that could still become a match;
//   - after its text (check_token -> kAfterText): the token's text is emitted, then the request
//     ends (max_tokens, the model length, a grammar that has completed).
// A request that ends for any reason but a cut releases what each text policy holds
// (flush_text), in list order, each policy's output passing through the later ones.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/stop_matcher.h"

namespace spindle::engine {

// Where a policy ends the request at a token (see above).
enum class StopPoint { kNone, kBeforeText, kAfterText };

struct StopVerdict {
  StopPoint point = StopPoint::kNone;
  FinishReason reason = FinishReason::kNone;  // set when point is not kNone
};

class StopPolicy {
 public:
  virtual ~StopPolicy() = default;
  // `token` was just appended to request.output (request.output.back() == token).
  virtual StopVerdict check_token(const Request& /*request*/, TokenId /*token*/) { return {}; }
  // The new text of the token (whole UTF-8 sequences), in place: what may be emitted now. True:
  // the request ends here (finish reason kStop), `text` is what precedes the cut.
  virtual bool filter_text(std::string& /*text*/) { return false; }
  // The request ends (not at this policy's cut): appends the text it held back.
  virtual void flush_text(std::string& /*text*/) {}
};

// End-of-sequence and stop token ids: ends before the token's text, with kStop.
class StopTokenPolicy final : public StopPolicy {
 public:
  explicit StopTokenPolicy(std::vector<TokenId> ids) : ids_(std::move(ids)) {}
  StopVerdict check_token(const Request& request, TokenId token) override;

 private:
  std::vector<TokenId> ids_;
};

// Stop strings (StopMatcher): holds back a possible start of one, cuts at the first match.
class StopStringPolicy final : public StopPolicy {
 public:
  explicit StopStringPolicy(std::vector<std::string> stops) : matcher_(std::move(stops)) {}
  bool filter_text(std::string& text) override;
  void flush_text(std::string& text) override;

 private:
  StopMatcher matcher_;
};

// max_tokens output tokens, or a context (prompt + known output) of max_model_len: ends after the
// token's text, with kLength.
class LengthPolicy final : public StopPolicy {
 public:
  LengthPolicy(int max_tokens, int max_model_len) : max_tokens_(max_tokens), max_model_len_(max_model_len) {}
  StopVerdict check_token(const Request& request, TokenId token) override;

 private:
  int max_tokens_;
  int max_model_len_;
};

// The stop token ids of a request: the end-of-sequence ids of every source (unless ignore_eos)
// and its own stop_token_ids, each once.
std::vector<TokenId> stop_token_ids(std::span<const TokenId> tokenizer_eos_ids, std::span<const TokenId> model_eos_ids,
                                    bool ignore_eos, std::span<const TokenId> request_stop_ids);

}  // namespace spindle::engine
