// Speculative decoding, part 3: whether to speculate this step, and with how many drafts. Verifying
// k drafts costs k more query rows per sequence; at batch 1 that is nearly free where the step is
// bound by reading the weights, at a large batch (or on a CPU whose small-batch kernels are
// compute-bound: kjv-tiny on 2 AVX2 cores, 2 rows cost 1.07x a 1-row step, 3 rows 1.3x, 4 rows
// 1.55x, 5 rows 1.78x) each extra row costs more than the last, so fewer drafts can be faster
// than more. The decision is made from measurements, not from a constant, with cost and benefit
// measured apart:
//   - cost: for each batch-size bucket (decoding sequences: 1, 2-3, 4-7, 8-15, ...) and each draft
//     count k (0: plain decoding; else the most drafts a sequence verified in the step) the wall
//     seconds of the last kWindow decode steps (proposal included; the median, so that a draft
//     model's first step for a request, which also runs the prompt through the draft, does not
//     decide);
//   - benefit: the tokens the step is expected to emit with at most k drafts per sequence, from
//     each speculating request's measured acceptance (the engine passes, for each k, the sum over
//     requests of E[tokens] = (1 - a^(k'+1)) / (1 - a) with k' = min(k, its drafts); 1 for each
//     request that does not speculate).
// It picks the k with the most expected tokens per second (the way it chose before is kept unless
// another is kHysteresis faster). A bucket measures its ways in increasing k, plain decoding first,
// kMinSamples times each, and stops climbing at the first k that is kHysteresis slower than the best
// below it (a large batch never pays for a 4-draft step that costs 6x a plain one); then it re-measures a
// neighbour of its choice (one draft fewer or more, the less recently measured) after
// kReexploreEvery decisions, and again after twice as many each time the choice stands (up to
// kMaxReexploreEvery), so the choice can move a step at a time as costs and acceptance drift. A
// re-measurement drops the neighbour's old samples and runs it kMinSamples steps in a row: its cost
// is then what it is now, next to the choice's own recent steps. (One step added to a window of old
// ones moved no median: on a shared 2-core VM a way measured during another process's burst stayed
// "slower" for the whole run, plain decoding chosen for 2010 of 2048 tokens; bench/results/
// 2026-12-05-zen3-spec-remeasure.)
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace spindle::engine::speculative {

// Expected tokens a verify of k drafts emits when each draft is accepted with probability a
// (independently, until the first rejection), the bonus token included: 1 + a + ... + a^k.
double expected_tokens(double a, int k);

class CostModel {
 public:
  static constexpr int kMaxDrafts = 16;  // draft counts above share the last way
  static constexpr int kMinSamples = 5;
  static constexpr int kReexploreEvery = 20;  // decisions between re-measurements at first,
  static constexpr int kMaxReexploreEvery = 640;  // doubled each time one confirms the choice
  static constexpr int kWindow = 9;  // steps per way and bucket the median is taken over
  static constexpr double kHysteresis = 1.05;  // another way must be 5% faster to switch
  static constexpr int kLogEvery = 100;  // decisions of a bucket between two logged changes at most

  // always: speculate on every step with every draft (--speculative-always), measuring nothing.
  explicit CostModel(bool always = false) : always_(always) {}

  // How many drafts per sequence (at most) a decode step over num_decoding sequences verifies:
  // 0 (plain decoding) to expected.size() - 1. expected[k]: the tokens the step is expected to
  // emit with at most k drafts per sequence (expected[0] = num_decoding; non-decreasing in k; a
  // k with no more than k - 1 gives, e.g. no request has k drafts, is never chosen).
  int choose_drafts(int num_decoding, std::span<const double> expected);
  // A pure decode step ran over num_decoding sequences in `seconds` of wall time; `drafts`: the
  // most drafts a sequence verified (0: none speculated).
  void record(int drafts, int num_decoding, double seconds);
  // Set when the chosen way of a bucket changed at a decision (at most once per kLogEvery of its
  // decisions): a log line saying why.
  std::optional<std::string> take_change();

  static int bucket_of(int num_decoding);  // floor(log2(n)), capped
  // Median step seconds of a bucket's last steps with `drafts` drafts (0 when unmeasured).
  double step_seconds(int bucket, int drafts) const;

 private:
  struct Times {
    std::array<double, kWindow> recent{};  // the last min(samples, kWindow) steps (a ring)
    int samples = 0;
    // Samples from this index on are a re-measurement's: once kMinSamples of them exist, the
    // older ones no longer count in the median.
    int fresh_from = 0;
    int last_decision = -1;  // the bucket's decision count when this way last ran
    double median() const;
  };
  struct Bucket {
    std::array<Times, kMaxDrafts + 1> way{};  // [k]: at most k drafts per sequence
    int decisions = 0;
    int chosen = -1;  // -1: not yet decided
    int logged_at = -kLogEvery;  // the decision count of the last logged change
    int reexplore_every = kReexploreEvery;
    int next_reexplore = kReexploreEvery;  // the decision count of the next re-measurement
    int remeasuring = -1;                  // the way being re-measured (-1: none)
    int remeasure_until = 0;               // ... at most until this decision count
  };
  static constexpr int kNumBuckets = 12;
  static int way_of(int drafts) { return std::clamp(drafts, 0, kMaxDrafts); }
  void note_change(int bucket, std::span<const double> expected, int from, int to);
  bool always_;
  std::array<Bucket, kNumBuckets> buckets_{};
  std::optional<std::string> change_;
};

}  // namespace spindle::engine::speculative
