// The decode log window: decode steps, generated tokens and speculative verifies since the last
// throughput log line (EngineOptions::decode_log_interval). Engine thread only.
#pragma once

#include <cstdint>

#include "engine/metrics.h"
#include "engine/request.h"

namespace spindle::engine {

class DecodeWindow {
 public:
  void record_step(uint64_t num_tokens) {
    ++steps_;
    tokens_ += num_tokens;
  }
  // A verify of num_drafts drafts that accepted num_accepted (it emitted num_accepted + 1 tokens).
  void record_verify(int num_drafts, int num_accepted);
  int num_steps() const { return steps_; }
  // Logs "decode: N steps, R running, W waiting, T tok/s generated[, spec accept length L, accept
  // rate A]", sets the windowed spec gauges and starts a new window.
  void log_and_reset(int num_running, int num_waiting, Metrics& metrics);

 private:
  int steps_ = 0;
  uint64_t tokens_ = 0;
  uint64_t spec_accepted_ = 0, spec_forwards_ = 0, spec_drafted_ = 0, spec_accepted_drafts_ = 0;
  Clock::time_point start_ = Clock::now();
};

}  // namespace spindle::engine
