#include "server/relay.h"

namespace spindle::server {

Relay::Relay(std::vector<std::shared_ptr<engine::RequestStream>> streams)
    : streams_(std::move(streams)), finished_(streams_.size(), false) {}

Relay::~Relay() {
  cancel();
  for (auto& stream : streams_) stream->set_notify({});
}

void Relay::cancel() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!finished_[i]) streams_[i]->cancel();
  }
}

std::string Relay::abort_stream(const std::string& reason) {
  if (done_) return "";
  cancel();
  done_ = true;
  return abort_events(reason);
}

bool Relay::next_output(size_t i, engine::RequestOutput& out) { return !finished_[i] && streams_[i]->try_pop(out); }

}  // namespace spindle::server
