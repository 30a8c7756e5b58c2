#include "engine/request.h"

namespace spindle::engine {

Request::Request(uint64_t id_, std::vector<int32_t> prompt_, SamplingParams params, uint64_t default_seed,
                 std::shared_ptr<RequestStream> stream_, kv::PageAllocator& allocator,
                 const tokenizer::Tokenizer& tokenizer)
    : id(id_),
      prompt(std::move(prompt_)),
      sampler(params, default_seed),
      stream(std::move(stream_)),
      table(allocator),
      detokenizer(tokenizer, /*skip_special_tokens=*/true),
      stop_matcher(params.stop) {}

std::vector<int32_t> Request::all_tokens() const {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  return all;
}

}  // namespace spindle::engine
