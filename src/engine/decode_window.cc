#include "engine/decode_window.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>

namespace spindle::engine {

void DecodeWindow::record_verify(int num_drafts, int num_accepted) {
  spec_accepted_ += static_cast<uint64_t>(num_accepted + 1);
  spec_forwards_ += 1;
  spec_drafted_ += static_cast<uint64_t>(num_drafts);
  spec_accepted_drafts_ += static_cast<uint64_t>(num_accepted);
}

void DecodeWindow::log_and_reset(int num_running, int num_waiting, Metrics& metrics) {
  const double seconds = seconds_between(start_, Clock::now());
  std::string spec;
  if (spec_forwards_ > 0) {
    spec = fmt::format(", spec accept length {:.2f}, accept rate {:.2f}", double(spec_accepted_) / double(spec_forwards_),
                       spec_drafted_ ? double(spec_accepted_drafts_) / double(spec_drafted_) : 0.0);
  }
  spdlog::info("decode: {} steps, {} running, {} waiting, {:.1f} tok/s generated{}", steps_, num_running, num_waiting,
               seconds > 0 ? double(tokens_) / seconds : 0.0, spec);
  metrics.update([&](MetricsSnapshot& s) {
    s.spec_num_accepted_tokens = spec_accepted_;
    s.spec_num_forward_ct = spec_forwards_;
  });
  *this = DecodeWindow{};
}

}  // namespace spindle::engine
