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

double CostModel::Rate::median() const {
  const int n = std::min(samples, kWindow);
  if (n == 0) return 0.0;
  std::array<double, kWindow> sorted = recent;
  std::sort(sorted.begin(), sorted.begin() + n);
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double CostModel::tokens_per_second(int bucket, bool speculated) const {
  return buckets_.at(static_cast<size_t>(bucket)).way[speculated ? 1 : 0].median();
}

bool CostModel::should_speculate(int num_decoding) {
  if (always_) return true;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of(num_decoding))];
  ++b.decisions;
  if (b.way[1].samples < kMinSamples) return true;
  if (b.way[0].samples < kMinSamples) return false;
  const bool faster_with = b.way[1].median() >= b.way[0].median();
  if (b.decisions % kReexploreEvery == 0) return !faster_with;
  return faster_with;
}

void CostModel::record(bool speculated, int num_decoding, int tokens, double seconds) {
  if (always_ || seconds <= 0 || tokens <= 0) return;
  const int index = bucket_of(num_decoding);
  Bucket& b = buckets_[static_cast<size_t>(index)];
  Rate& r = b.way[speculated ? 1 : 0];
  r.recent[static_cast<size_t>(r.samples % kWindow)] = tokens / seconds;
  ++r.samples;
  if (b.way[0].samples < kMinSamples || b.way[1].samples < kMinSamples) return;
  const int preferred = b.way[1].median() >= b.way[0].median() ? 1 : 0;
  if (preferred != b.preferred) {
    const int lo = 1 << index, hi = index == kNumBuckets - 1 ? 0 : (2 << index) - 1;
    change_ = fmt::format("speculative decoding {} for decode batches of {}{}: {:.0f} tok/s measured with it, {:.0f} "
                          "without",
                          preferred ? "on" : "off (verifying the drafts costs more than they save)", lo,
                          hi == 0 ? std::string(" or more") : (hi == lo ? std::string() : fmt::format("-{}", hi)),
                          b.way[1].median(), b.way[0].median());
    b.preferred = preferred;
  }
}

std::optional<std::string> CostModel::take_change() {
  auto c = std::move(change_);
  change_.reset();
  return c;
}

}  // namespace spindle::engine::spec
