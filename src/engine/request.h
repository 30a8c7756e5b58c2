// One generation request as the engine sees it: its tokens, sampling state, KV pages and the
// stream its client reads. Owned by the Scheduler, touched only by the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "kv/block_table.h"
#include "tokenizer/incremental_detokenizer.h"

namespace spindle::engine {

using Clock = std::chrono::steady_clock;

struct Request {
  Request(uint64_t id, std::vector<int32_t> prompt, SamplingParams params, uint64_t default_seed,
          std::shared_ptr<RequestStream> stream, kv::PageAllocator& allocator, const tokenizer::Tokenizer& tokenizer);

  uint64_t id;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  Sampler sampler;
  std::shared_ptr<RequestStream> stream;
  kv::BlockTable table;
  // Tokens (of prompt + output, in order) whose K/V are in table's pages.
  int num_computed_tokens = 0;
  int num_cached_prompt_tokens = 0;  // reused from the prefix cache at first admission
  int num_preemptions = 0;
  bool preempted = false;            // waits to be recomputed (set by preemption, cleared on admission)
  tokenizer::IncrementalDetokenizer detokenizer;
  StopMatcher stop_matcher;
  Clock::time_point arrival = Clock::now();
  std::optional<Clock::time_point> last_token_time;
  bool finished = false;

  int num_tokens() const { return static_cast<int>(prompt.size() + output.size()); }
  int32_t token_at(int index) const {
    return index < static_cast<int>(prompt.size()) ? prompt[index] : output[index - prompt.size()];
  }
  // prompt + output
  std::vector<int32_t> all_tokens() const;
};

}  // namespace spindle::engine
