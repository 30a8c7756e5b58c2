// Speculative decoding, part 3: whether to speculate this step. Verifying k drafts costs k more
// query rows per sequence; at batch 1 that is nearly free where the step is bound by reading the
// weights, at a large batch (or on a CPU whose small-batch kernels are compute-bound) the extra
// rows cost more than the accepted tokens save. The decision is made from measurements, not from
// a constant, with cost and benefit measured apart:
//   - cost: for each batch-size bucket (decoding sequences: 1, 2-3, 4-7, 8-15, ...) the wall
//     seconds of the last kWindow decode steps with and without speculation (proposal included;
//     the median, so that a draft model's first step for a request, which also runs the prompt
//     through the draft, does not decide);
//   - benefit: the tokens the step is expected to emit, from each speculating request's measured
//     acceptance (the engine passes sum over requests of E[tokens] = (1 - a^(k+1)) / (1 - a) for
//     per-token acceptance a and k drafts; 1 for each request that does not speculate).
// It speculates when expected tokens / seconds with it beats decoding sequences / seconds
// without (by kHysteresis to leave the way it chose before). A bucket first measures each way
// kMinSamples times; then it runs the way it would not choose once after kReexploreEvery
// decisions, and again after twice as many each time the choice stands (up to
// kMaxReexploreEvery), so both costs stay current without paying for a losing way often.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace spindle::engine::spec {

// Expected tokens a verify of k drafts emits when each draft is accepted with probability a
// (independently, until the first rejection), the bonus token included: 1 + a + ... + a^k.
double expected_tokens(double a, int k);

class CostModel {
 public:
  static constexpr int kMinSamples = 5;
  static constexpr int kReexploreEvery = 20;  // decisions between re-measurements at first,
  static constexpr int kMaxReexploreEvery = 640;  // doubled each time one confirms the choice
  static constexpr int kWindow = 9;  // steps per way and bucket the median is taken over
  static constexpr double kHysteresis = 1.05;  // the other way must be 5% faster to switch

  // always: speculate on every step (--speculative-always), measuring nothing.
  explicit CostModel(bool always = false) : always_(always) {}

  // Whether a decode step over num_decoding sequences speculates, when it is then expected to
  // emit expected_tokens tokens (and num_decoding without).
  bool should_speculate(int num_decoding, double expected_tokens);
  // A pure decode step ran: `speculated` (at least one sequence verified drafts), over
  // num_decoding sequences, in `seconds` of wall time.
  void record(bool speculated, int num_decoding, double seconds);
  // Set when the chosen way of a bucket changed at the last decision: a log line saying why.
  std::optional<std::string> take_change();

  static int bucket_of(int num_decoding);  // floor(log2(n)), capped
  // Median step seconds of a bucket's last steps (0 when unmeasured).
  double step_seconds(int bucket, bool speculated) const;

 private:
  struct Times {
    std::array<double, kWindow> recent{};  // the last min(samples, kWindow) steps (a ring)
    int samples = 0;
    double median() const;
  };
  struct Bucket {
    Times way[2];  // [0] without, [1] with speculation
    int decisions = 0;
    int chosen = -1;  // -1: not yet decided
    int reexplore_every = kReexploreEvery;
    int next_reexplore = kReexploreEvery;  // the decision count of the next re-measurement
  };
  static constexpr int kNumBuckets = 12;
  bool always_;
  std::array<Bucket, kNumBuckets> buckets_{};
  std::optional<std::string> change_;
};

}  // namespace spindle::engine::spec
