#include "engine/spec/cost_model.h"

#include <fmt/format.h>

#include <algorithm>

namespace spindle::engine::spec {

int CostModel::bucket_of(int n) {
  int b = 0;
  while (n > 1 && b < kNumBuckets - 1) {
    n >>= 1;
    ++b;
  }
  return b;
}

double CostModel::tokens_per_second(int bucket, bool speculated) const {
  const Rate& r = buckets_.at(static_cast<size_t>(bucket)).way[speculated ? 1 : 0];
  return r.samples > 0 ? r.tokens_per_second : 0.0;
}

bool CostModel::should_speculate(int num_decoding) {
  if (always_) return true;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of(num_decoding))];
  ++b.decisions;
  if (b.way[1].samples < kMinSamples) return true;
  if (b.way[0].samples < kMinSamples) return false;
  const bool faster_with = b.way[1].tokens_per_second >= b.way[0].tokens_per_second;
  if (b.decisions % kReexploreEvery == 0) return !faster_with;
  return faster_with;
}

void CostModel::record(bool speculated, int num_decoding, int tokens, double seconds) {
  if (always_ || seconds <= 0 || tokens <= 0) return;
  const int index = bucket_of(num_decoding);
  Bucket& b = buckets_[static_cast<size_t>(index)];
  Rate& r = b.way[speculated ? 1 : 0];
  const double rate = tokens / seconds;
  r.tokens_per_second = r.samples == 0 ? rate : (1 - kSmoothing) * r.tokens_per_second + kSmoothing * rate;
  ++r.samples;
  if (b.way[0].samples < kMinSamples || b.way[1].samples < kMinSamples) return;
  const int preferred = b.way[1].tokens_per_second >= b.way[0].tokens_per_second ? 1 : 0;
  if (preferred != b.preferred) {
    const int lo = 1 << index, hi = index == kNumBuckets - 1 ? 0 : (2 << index) - 1;
    change_ = fmt::format("speculative decoding {} for decode batches of {}{}: {:.0f} tok/s measured with it, {:.0f} "
                          "without",
                          preferred ? "on" : "off (verifying the drafts costs more than they save)", lo,
                          hi == 0 ? std::string(" or more") : (hi == lo ? std::string() : fmt::format("-{}", hi)),
                          b.way[1].tokens_per_second, b.way[0].tokens_per_second);
    b.preferred = preferred;
  }
}

std::optional<std::string> CostModel::take_change() {
  auto c = std::move(change_);
  change_.reset();
  return c;
}

}  // namespace spindle::engine::spec
