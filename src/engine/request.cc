#include "engine/request.h"

namespace spindle::engine {

Request::Request(uint64_t id_, std::vector<TokenId> prompt_, kv::PageAllocator& allocator)
    : id(id_), prompt(std::move(prompt_)), table(allocator) {}

std::vector<TokenId> Request::all_tokens() const {
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  return all;
}

}  // namespace spindle::engine
