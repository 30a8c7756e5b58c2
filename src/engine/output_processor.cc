#include "engine/output_processor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace spindle::engine {
namespace {

// How many rows of `width` values `rows` holds, checked to continue r's prompt rows where the last
// batch stopped and to end before its last position (whose row is the first sampled token's).
// `what` names the rows in the error.
int num_prompt_rows(const Request& r, std::span<const float> rows, int width, int first_position, const char* what) {
  const int n = static_cast<int>(rows.size() / static_cast<size_t>(width));
  SPINDLE_CHECK(first_position == r.num_prompt_rows_done && first_position + n < static_cast<int>(r.prompt.size()),
                "request {}: {} rows of positions [{}, {}) after {} done, prompt of {}", r.id, what, first_position,
                first_position + n, r.num_prompt_rows_done, r.prompt.size());
  return n;
}

}  // namespace

RequestOutputState::RequestOutputState(SamplingParams params, uint64_t seed, std::shared_ptr<RequestStream> stream_,
                                       const tokenizer::Tokenizer& tokenizer)
    : sampler(std::move(params), seed),
      stream(std::move(stream_)),
      detokenizer(tokenizer, sampler.params().skip_special_tokens) {}

OutputProcessor::OutputProcessor(const tokenizer::Tokenizer& tokenizer, std::vector<TokenId> model_eos_ids,
                                 int max_model_len, Metrics& metrics, int vocab_size)
    : tokenizer_(tokenizer),
      model_eos_ids_(std::move(model_eos_ids)),
      max_model_len_(max_model_len),
      metrics_(metrics),
      grammar_tokenizer_(tokenizer, model_eos_ids_, vocab_size > 0 ? vocab_size : tokenizer.vocab_size()) {}

std::unique_ptr<RequestOutputState> OutputProcessor::make_state(SamplingParams params, uint64_t seed,
                                                                std::shared_ptr<RequestStream> stream) const {
  auto state = std::make_unique<RequestOutputState>(std::move(params), seed, std::move(stream), tokenizer_);
  const SamplingParams& p = state->sampler.params();
  auto& policies = state->stop_policies;
  policies.reserve(4);
  std::vector<TokenId> ids = stop_token_ids(tokenizer_.eos_ids(), model_eos_ids_, p.ignore_eos, p.stop_token_ids);
  if (!ids.empty()) policies.push_back(std::make_unique<StopTokenPolicy>(std::move(ids)));
  if (!p.stop.empty()) policies.push_back(std::make_unique<StopStringPolicy>(p.stop));
  if (p.grammar) {
    // Before the length: a document completed by the last token allowed is "stop", not "length".
    state->grammar_tokenizer = grammar_tokenizer_.get();
    policies.push_back(std::make_unique<GrammarStopPolicy>(state->grammar));
  }
  policies.push_back(std::make_unique<LengthPolicy>(p.max_tokens, max_model_len_));
  return state;
}

void OutputProcessor::add(uint64_t request_id, std::unique_ptr<RequestOutputState> state) {
  const SamplingParams& p = state->sampler.params();
  if (p.grammar && !state->grammar) {
    state->grammar = std::make_unique<GrammarState>(grammar_matchers_.start(p.grammar, state->grammar_tokenizer),
                                                    p.grammar_arming.get());
  }
  states_[request_id] = std::move(state);
}

void OutputProcessor::accept_token(Request& r, RequestOutputState& o, const SampledToken& sampled) {
  if (sampled.non_finite) {
    fail_non_finite(r, o);
    return;
  }
  if (o.grammar && !o.grammar->accept_token(sampled.token)) {
    fail(r, o,
         fmt::format("the grammar of this request allows no token of the model's vocabulary after {} output tokens "
                     "(token {} was drawn)",
                     r.output.size(), sampled.token),
         /*failed=*/false);
    return;
  }
  const auto now = Clock::now();
  if (r.output.empty()) {
    metrics_.observe_time_to_first_token(seconds_between(r.arrival, now));
  } else if (o.last_token_time && r.num_preemptions == 0) {
    metrics_.observe_inter_token_latency(seconds_between(*o.last_token_time, now));
  }
  o.last_token_time = now;
  r.output.push_back(sampled.token);
  ++num_accepted_tokens_;
  metrics_.update([](MetricsSnapshot& s) { ++s.generation_tokens_total; });

  RequestOutput out;
  out.tokens.push_back(sampled.token);
  const auto& p = o.sampler.params();
  if (p.logprobs || p.top_logprobs > 0) out.logprobs.push_back(sampled);
  out.prompt_logprobs = std::move(o.prompt_logprobs);
  o.prompt_logprobs.clear();
  decide(r, o, sampled.token, out);
  out.num_prompt_tokens = static_cast<int>(r.prompt.size());
  out.num_output_tokens = static_cast<int>(r.output.size());
  out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  out.num_accepted_draft_tokens = r.num_accepted_draft_tokens;
  if (out.finished) {
    r.finished = true;
    count_finished(r, now);
  }
  push(o, out);
}

void OutputProcessor::accept_prompt_rows(Request& r, RequestOutputState& o, std::span<const float> rows, int vocab,
                                         int first_position) {
  const int n = num_prompt_rows(r, rows, vocab, first_position, "prompt");
  const int k = std::max(0, o.sampler.params().prompt_logprobs);
  for (int i = 0; i < n; ++i) {
    const auto row = rows.subspan(static_cast<size_t>(i) * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    o.prompt_logprobs.push_back(prompt_logprob(row, r.prompt[static_cast<size_t>(first_position + i + 1)], k));
  }
  r.num_prompt_rows_done = first_position + n;
}

void OutputProcessor::accept_pooled_rows(Request& r, RequestOutputState& o, std::span<const float> rows, int hidden,
                                         int first_position) {
  const int n = num_prompt_rows(r, rows, hidden, first_position, "pooled");
  o.pooled.resize(static_cast<size_t>(hidden));
  const bool mean = o.sampler.params().pooling == PoolingConfig::Mode::kMeanTokens;
  for (int i = 0; i < n; ++i) {
    if (!mean && first_position + i != 0) continue;
    for (int j = 0; j < hidden; ++j) o.pooled[static_cast<size_t>(j)] += rows[static_cast<size_t>(i * hidden + j)];
  }
  r.num_prompt_rows_done = first_position + n;
}

void OutputProcessor::accept_embedding(Request& r, RequestOutputState& o, std::span<const float> hidden) {
  if (!all_finite(hidden) || !std::all_of(o.pooled.begin(), o.pooled.end(), [](double x) { return std::isfinite(x); })) {
    fail_non_finite(r, o);
    return;
  }
  RequestOutput out;
  const PoolingConfig::Mode mode = o.sampler.params().pooling;
  const size_t num_prompt = r.prompt.size();
  if (mode == PoolingConfig::Mode::kLastToken || (mode == PoolingConfig::Mode::kClsToken && num_prompt == 1)) {
    out.embedding.assign(hidden.begin(), hidden.end());
  } else {
    SPINDLE_CHECK(r.prompt_rows_complete() && o.pooled.size() == hidden.size(),
                  "request {}: pooling without every prompt row ({} of {})", r.id, r.num_prompt_rows_done, num_prompt - 1);
    out.embedding.resize(hidden.size());
    for (size_t j = 0; j < hidden.size(); ++j) {
      out.embedding[j] = mode == PoolingConfig::Mode::kClsToken
                             ? static_cast<float>(o.pooled[j])
                             : static_cast<float>((o.pooled[j] + hidden[j]) / static_cast<double>(num_prompt));
    }
  }
  out.finished = true;
  out.finish_reason = FinishReason::kStop;
  out.num_prompt_tokens = static_cast<int>(r.prompt.size());
  out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  r.finished = true;
  count_finished(r, Clock::now());
  push(o, out);
}

void OutputProcessor::decide(Request& r, RequestOutputState& o, TokenId token, RequestOutput& out) {
  StopVerdict verdict;
  for (const auto& policy : o.stop_policies) {
    const StopVerdict v = policy->check_token(r, token);
    if (v.point == StopPoint::kBeforeText) {
      verdict = v;
      break;
    }
    if (v.point == StopPoint::kAfterText && verdict.point == StopPoint::kNone) verdict = v;
  }
  if (verdict.point == StopPoint::kBeforeText) {  // the token's text is not emitted
    out.finished = true;
    out.finish_reason = verdict.reason;
    out.text = flush_held_text(o);
    return;
  }
  o.detokenizer.push(token, out.text);
  for (const auto& policy : o.stop_policies) {
    if (policy->filter_text(out.text)) {  // cut at a stop string: nothing after it is emitted
      out.finished = true;
      out.finish_reason = FinishReason::kStop;
      return;
    }
  }
  if (verdict.point == StopPoint::kAfterText) {
    out.finished = true;
    out.finish_reason = verdict.reason;
    out.text += flush_held_text(o);
  }
}

std::string OutputProcessor::flush_held_text(RequestOutputState& o) {
  std::string text = o.detokenizer.finish();
  for (const auto& policy : o.stop_policies) {
    if (policy->filter_text(text)) return text;
    policy->flush_text(text);
  }
  return text;
}

void OutputProcessor::push(RequestOutputState& o, RequestOutput& out) {
  for (const auto& transformer : o.transformers) transformer->transform(out);
  o.stream->push(std::move(out));
}

void OutputProcessor::accept_verified(Request& r, RequestOutputState& o, std::span<const SampledToken> tokens,
                                      int num_accepted_drafts) {
  for (size_t i = 0; i < tokens.size() && !r.finished; ++i) {
    if (static_cast<int>(i) < num_accepted_drafts) ++r.num_accepted_draft_tokens;
    accept_token(r, o, tokens[i]);
  }
}

void OutputProcessor::fail_non_finite(Request& r, RequestOutputState& o) {
  // NaN or Inf logits: no token; its KV may hold non-finite values, the prefix cache must not keep them.
  metrics_.update([](MetricsSnapshot& s) { ++s.non_finite_logits_total; });
  fail(r, o, "the model produced non-finite logits (NaN or Inf)", /*failed=*/true);
}

void OutputProcessor::fail(Request& r, RequestOutputState& o, std::string message, bool failed) {
  RequestOutput out;
  out.finished = true;
  out.finish_reason = FinishReason::kError;
  out.error = std::move(message);
  out.num_prompt_tokens = static_cast<int>(r.prompt.size());
  out.num_output_tokens = static_cast<int>(r.output.size());
  r.finished = true;
  r.failed = failed;
  push(o, out);
}

void OutputProcessor::finish_aborted(Request& r) {
  RequestOutput out;
  out.finished = true;
  out.finish_reason = FinishReason::kAbort;
  out.num_prompt_tokens = static_cast<int>(r.prompt.size());
  out.num_output_tokens = static_cast<int>(r.output.size());
  push(at(r.id), out);
  r.finished = true;
  metrics_.update([](MetricsSnapshot& s) { ++s.requests_aborted_total; });
}

void OutputProcessor::finish_failed(const Request& r, const std::string& message) {
  RequestOutput out;
  out.finished = true;
  out.finish_reason = FinishReason::kError;
  out.error = message;
  push(at(r.id), out);
}

void OutputProcessor::finish_over_capacity(const Request& r, int capacity_tokens) {
  RequestOutputState& o = at(r.id);
  RequestOutput out;
  out.finished = true;
  out.num_prompt_tokens = static_cast<int>(r.prompt.size());
  out.num_output_tokens = static_cast<int>(r.output.size());
  if (r.output.empty()) {  // never ran: the prompt alone does not fit
    out.finish_reason = FinishReason::kError;
    out.error = fmt::format("the prompt of {} tokens does not fit the KV cache of {} tokens (--max-total-tokens)",
                            r.prompt.size(), capacity_tokens);
  } else {  // grew to the whole KV cache
    out.finish_reason = FinishReason::kLength;
    out.text = flush_held_text(o);
    count_finished(r, Clock::now());
  }
  out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  push(o, out);
}

void OutputProcessor::count_finished(const Request& r, Clock::time_point now) {
  metrics_.observe_e2e_latency(seconds_between(r.arrival, now));
  metrics_.update([](MetricsSnapshot& s) { ++s.requests_finished_total; });
}

}  // namespace spindle::engine
