#include "engine/speculative/cost_model.h"

#include <fmt/format.h>

#include <cmath>

namespace spindle::engine::speculative {

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
  int first = std::max(0, samples - kWindow);
  if (samples - fresh_from >= kMinSamples) first = std::max(first, fresh_from);
  const int n = samples - first;
  if (n == 0) return 0.0;
  std::array<double, kWindow> sorted{};
  for (int i = 0; i < n; ++i) sorted[static_cast<size_t>(i)] = recent[static_cast<size_t>((first + i) % kWindow)];
  std::sort(sorted.begin(), sorted.begin() + n);
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double CostModel::step_seconds(int bucket, int drafts) const {
  return buckets_.at(static_cast<size_t>(bucket)).way[static_cast<size_t>(way_of(drafts))].median();
}

int CostModel::choose_drafts(int num_decoding, std::span<const double> expected) {
  const int max_k = std::min(static_cast<int>(expected.size()) - 1, kMaxDrafts);
  if (max_k <= 0) return 0;
  // The ways worth running: plain decoding, and each k expected to emit more than k - 1 does.
  std::array<bool, kMaxDrafts + 1> useful{};
  useful[0] = true;
  int largest = 0;
  for (int k = 1; k <= max_k; ++k) {
    useful[static_cast<size_t>(k)] = expected[static_cast<size_t>(k)] > expected[static_cast<size_t>(k) - 1] + 1e-9;
    if (useful[static_cast<size_t>(k)]) largest = k;
  }
  if (largest == 0) return 0;
  if (always_) return largest;
  const int index = bucket_of(num_decoding);
  Bucket& b = buckets_[static_cast<size_t>(index)];
  const int decision = b.decisions++;
  auto run = [&](int k) {
    b.way[static_cast<size_t>(k)].last_decision = decision;
    return k;
  };
  auto rate = [&](int k) { return expected[static_cast<size_t>(k)] / b.way[static_cast<size_t>(k)].median(); };
  // A re-measurement in progress runs its way until it has kMinSamples fresh steps (or for
  // 2 * kMinSamples decisions, should steps with that many drafts not come).
  if (b.remeasuring >= 0) {
    const int k = b.remeasuring;
    if (decision < b.remeasure_until && k <= largest && useful[static_cast<size_t>(k)] &&
        b.way[static_cast<size_t>(k)].samples - b.way[static_cast<size_t>(k)].fresh_from < kMinSamples) {
      return run(k);
    }
    b.remeasuring = -1;
  }
  // Ways are measured in increasing k, plain decoding first, each kMinSamples times; the climb stops
  // at the first k that is kHysteresis slower than the best below it: more drafts cost more rows
  // (and proposal) per step for ever fewer expected tokens, so they are not measured at all (at a
  // large batch a 4-draft verify step can cost 6x a plain one: bench/results/2026-12-04-zen4-spec).
  // The best of the ways measured is chosen.
  int best = 0;
  for (int k = 0; k <= largest; ++k) {
    if (!useful[static_cast<size_t>(k)]) continue;
    if (b.way[static_cast<size_t>(k)].samples < kMinSamples) return run(k);
    if (k > 0 && rate(k) * kHysteresis < rate(best)) break;
    if (rate(k) > rate(best)) best = k;
  }
  // A way once chosen is left only for one kHysteresis faster (no flapping on noise).
  int chosen = best;
  // The way chosen before, if it can run at this step.
  const bool previous_available = b.chosen >= 0 && b.chosen <= largest && useful[static_cast<size_t>(b.chosen)];
  if (previous_available && rate(b.chosen) * kHysteresis >= rate(best)) {
    chosen = b.chosen;
  }
  if (chosen != b.chosen) {
    if (decision - b.logged_at >= kLogEvery) {
      note_change(index, expected, previous_available ? b.chosen : -1, chosen);
      b.logged_at = decision;
    }
    if (b.chosen < 0 || (b.chosen > 0) != (chosen > 0)) {  // the first choice, or on <-> off: re-measure soon
      b.reexplore_every = kReexploreEvery;
      b.next_reexplore = decision + kReexploreEvery;
    }
    b.chosen = chosen;
  }
  if (decision >= b.next_reexplore) {
    // Re-measure a neighbour of the choice (one draft fewer or one more, the less recently run)
    // afresh, kMinSamples steps: the choice can move a step at a time as costs and acceptance
    // drift, and no far, expensive way is paid for. If the choice then stands, wait twice as long
    // next time.
    b.next_reexplore = decision + b.reexplore_every;
    b.reexplore_every = std::min(2 * b.reexplore_every, kMaxReexploreEvery);
    int other = -1;
    auto consider = [&](int k) {
      if (k < 0 || k > largest || k == chosen || !useful[static_cast<size_t>(k)]) return;
      if (other < 0 || b.way[static_cast<size_t>(k)].last_decision < b.way[static_cast<size_t>(other)].last_decision) {
        other = k;
      }
    };
    int below = chosen - 1;
    while (below > 0 && !useful[static_cast<size_t>(below)]) --below;
    int above = chosen + 1;
    while (above <= largest && !useful[static_cast<size_t>(above)]) ++above;
    consider(below);
    consider(above);
    if (other >= 0) {
      Times& t = b.way[static_cast<size_t>(other)];
      t.fresh_from = t.samples;  // its old steps stop counting once the fresh ones are in
      b.remeasuring = other;
      b.remeasure_until = decision + 2 * kMinSamples;
      return run(other);
    }
  }
  return run(chosen);
}

// from: the way chosen before (-1: none, or one not available at this step).
void CostModel::note_change(int index, std::span<const double> expected, int from, int to) {
  const Bucket& b = buckets_[static_cast<size_t>(index)];
  const int lo = 1 << index, hi = index == kNumBuckets - 1 ? 0 : (2 << index) - 1;
  auto way = [&](int k) {
    const double s = b.way[static_cast<size_t>(k)].median();
    return fmt::format("{} draft{}: {:.1f} tokens expected in {:.2f} ms ({:.0f} tok/s)", k, k == 1 ? "" : "s",
                       expected[static_cast<size_t>(k)], 1e3 * s, expected[static_cast<size_t>(k)] / s);
  };
  change_ = fmt::format("speculative decoding {} for decode batches of {}{}: {}{}",
                        to > 0 ? fmt::format("on with up to {} draft{}", to, to == 1 ? "" : "s")
                               : std::string("off (verifying the drafts costs more than they save)"),
                        lo, hi == 0 ? std::string(" or more") : (hi == lo ? std::string() : fmt::format("-{}", hi)),
                        way(to), from >= 0 ? "; was " + way(from) : std::string());
}

void CostModel::record(int drafts, int num_decoding, double seconds) {
  if (always_ || seconds <= 0) return;
  Times& t = buckets_[static_cast<size_t>(bucket_of(num_decoding))].way[static_cast<size_t>(way_of(drafts))];
  t.recent[static_cast<size_t>(t.samples % kWindow)] = seconds;
  ++t.samples;
}

std::optional<std::string> CostModel::take_change() {
  auto c = std::move(change_);
  change_.reset();
  return c;
}

}  // namespace spindle::engine::speculative
