#include "engine/spec/cost_model.h"

#include <fmt/format.h>

#include <cmath>

namespace spindle::engine::spec {

double expected_tokens(double a, int k) {
  double sum = 1.0, term = 1.0;
  for (int i = 0; i < k; ++i) {
    term *= a;
    sum += term;
  }
  return sum;
}

int CostModel::bucket_of(int n) {
  int b = 0;
  while (n > 1 && b < kNumBuckets - 1) {
    n >>= 1;
    ++b;
  }
  return b;
}

double CostModel::Times::median() const {
  const int n = std::min(samples, kWindow);
  if (n == 0) return 0.0;
  std::array<double, kWindow> sorted = recent;
  std::sort(sorted.begin(), sorted.begin() + n);
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double CostModel::step_seconds(int bucket, bool speculated) const {
  return buckets_.at(static_cast<size_t>(bucket)).way[speculated ? 1 : 0].median();
}

bool CostModel::should_speculate(int num_decoding, double expected) {
  if (always_) return true;
  const int index = bucket_of(num_decoding);
  Bucket& b = buckets_[static_cast<size_t>(index)];
  ++b.decisions;
  if (b.way[1].samples < kMinSamples) return true;
  if (b.way[0].samples < kMinSamples) return false;
  const double with = expected / b.way[1].median(), without = num_decoding / b.way[0].median();
  // A way once chosen is left only for one kHysteresis faster (no flapping on noise).
  int chosen = with >= without ? 1 : 0;
  if (b.chosen == 1 && chosen == 0 && with * kHysteresis >= without) chosen = 1;
  if (b.chosen == 0 && chosen == 1 && without * kHysteresis >= with) chosen = 0;
  if (chosen != b.chosen) {
    const int lo = 1 << index, hi = index == kNumBuckets - 1 ? 0 : (2 << index) - 1;
    change_ = fmt::format(
        "speculative decoding {} for decode batches of {}{}: {:.1f} tokens expected in {:.2f} ms with it ({:.0f} "
        "tok/s), {} in {:.2f} ms without ({:.0f} tok/s)",
        chosen ? "on" : "off (verifying the drafts costs more than they save)", lo,
        hi == 0 ? std::string(" or more") : (hi == lo ? std::string() : fmt::format("-{}", hi)), expected,
        1e3 * b.way[1].median(), with, num_decoding, 1e3 * b.way[0].median(), without);
    b.chosen = chosen;
    b.reexplore_every = kReexploreEvery;  // a change: re-measure soon
    b.next_reexplore = b.decisions + kReexploreEvery;
  }
  if (b.decisions >= b.next_reexplore) {
    // Re-measure the other way once; if the choice then stands, wait twice as long next time.
    b.next_reexplore = b.decisions + b.reexplore_every;
    b.reexplore_every = std::min(2 * b.reexplore_every, kMaxReexploreEvery);
    return !chosen;
  }
  return chosen == 1;
}

void CostModel::record(bool speculated, int num_decoding, double seconds) {
  if (always_ || seconds <= 0) return;
  Times& t = buckets_[static_cast<size_t>(bucket_of(num_decoding))].way[speculated ? 1 : 0];
  t.recent[static_cast<size_t>(t.samples % kWindow)] = seconds;
  ++t.samples;
}

std::optional<std::string> CostModel::take_change() {
  auto c = std::move(change_);
  change_.reset();
  return c;
}

}  // namespace spindle::engine::spec
