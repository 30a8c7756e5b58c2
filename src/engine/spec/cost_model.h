// Speculative decoding, part 3: whether to speculate this step. Verifying k drafts costs k more
// query rows per sequence; at batch 1 that is nearly free (the step reads the weights once
// either way), at a large batch the step is compute-bound and the extra rows cost more than the
// accepted tokens save. The decision is made from measured decode steps, not from a constant:
// for each batch-size bucket (number of decoding sequences: 1, 2-3, 4-7, 8-15, ...) it keeps the
// generated tokens per second of the last kWindow decode steps with and without speculation (each
// step's tokens / wall seconds, proposal time included) and speculates while the median with it is
// the higher. The median, not a mean: a draft model's first step for a request also runs the
// request's whole prompt through the draft, an outlier that must not decide. A bucket measures
// each way kMinSamples times first, and every kReexploreEvery decisions it runs the other way
// once, so a change in acceptance is noticed.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace spindle::engine::spec {

class CostModel {
 public:
  static constexpr int kMinSamples = 5;
  static constexpr int kReexploreEvery = 20;
  static constexpr int kWindow = 9;  // steps per way and bucket the median is taken over

  // always: speculate on every step (--speculative-always), measuring nothing.
  explicit CostModel(bool always = false) : always_(always) {}

  // Whether a decode step over num_decoding sequences speculates.
  bool should_speculate(int num_decoding);
  // A pure decode step ran: `speculated` (at least one sequence verified drafts), the tokens it
  // appended and its wall seconds.
  void record(bool speculated, int num_decoding, int tokens, double seconds);
  // Set when the preferred way of a bucket changed at the last record(): a log line saying why.
  std::optional<std::string> take_change();

  static int bucket_of(int num_decoding);  // floor(log2(n)), capped
  // Measured tokens per second of a bucket (0 when unmeasured).
  double tokens_per_second(int bucket, bool speculated) const;

 private:
  struct Rate {
    std::array<double, kWindow> recent{};  // tokens / s of the last min(samples, kWindow) steps (a ring)
    int samples = 0;
    double median() const;
  };
  struct Bucket {
    Rate way[2];  // [0] without, [1] with speculation
    int decisions = 0;
    int preferred = -1;  // -1: not yet decided
  };
  static constexpr int kNumBuckets = 12;
  bool always_;
  std::array<Bucket, kNumBuckets> buckets_{};
  std::optional<std::string> change_;
};

}  // namespace spindle::engine::spec
