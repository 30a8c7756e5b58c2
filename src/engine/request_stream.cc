#include "engine/request_stream.h"

namespace spindle::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "";
}

void RequestStream::push(RequestOutput output) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(output));
    notify = notify_;
  }
  ready_.notify_one();
  if (notify) notify();
}

bool RequestStream::try_pop(RequestOutput& out) {
  std::lock_guard lock(mutex_);
  if (queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void RequestStream::set_notify(std::function<void()> notify) {
  bool queued = false;
  {
    std::lock_guard lock(mutex_);
    notify_ = notify;
    queued = !queue_.empty();
  }
  if (queued && notify) notify();
}

bool RequestStream::pop(RequestOutput& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

RequestOutput RequestStream::pop() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return !queue_.empty(); });
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

void RequestStream::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

bool RequestStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

}  // namespace spindle::engine
