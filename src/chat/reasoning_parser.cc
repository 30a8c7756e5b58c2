#include "chat/reasoning_parser.h"

#include <array>

#include "chat/format_table.h"
#include "chat/marker.h"

namespace spindle::chat {

namespace {

constexpr std::array kFormats = std::to_array<ReasoningFormat>({
    {"deepseek_r1", "<think>", "</think>"},
    {"qwen3", "<think>", "</think>"},
});

}  // namespace

std::span<const ReasoningFormat> reasoning_formats() { return kFormats; }

const ReasoningFormat& find_reasoning_format(std::string_view name) {
  return find_format(reasoning_formats(), name, "reasoning parser");
}

const ReasoningFormat* detect_reasoning_format(std::string_view template_text) {
  for (const auto& f : kFormats) {
    if (template_text.find(f.start) != std::string_view::npos && template_text.find(f.end) != std::string_view::npos) {
      return &f;
    }
  }
  return nullptr;
}

bool prompt_opens_reasoning(const ReasoningFormat& format, std::string_view prompt) {
  const size_t start = prompt.rfind(format.start);
  if (start == std::string_view::npos) return false;
  const size_t end = prompt.rfind(format.end);
  return end == std::string_view::npos || end < start;
}

ReasoningParser::ReasoningParser(const ReasoningFormat& format, bool opened_by_prompt)
    : format_(format), state_(opened_by_prompt ? State::kReasoningStart : State::kStart) {}

bool ReasoningParser::decide_start(ReasoningDelta& out) {
  const std::string_view stripped = strip_leading_space(held_);
  if (stripped.starts_with(format_.start)) {  // the opening marker (repeated after the prompt's: dropped)
    held_.erase(0, held_.size() - stripped.size() + format_.start.size());
    state_ = State::kReasoning;
    return true;
  }
  if (format_.start.starts_with(stripped)) return false;  // it may still become the marker
  if (state_ == State::kStart) {
    out.content += held_;
    held_.clear();
    state_ = State::kContent;
  } else {
    state_ = State::kReasoning;
  }
  return true;
}

void ReasoningParser::scan_reasoning(ReasoningDelta& out) {
  const size_t end = held_.find(format_.end);
  if (end != std::string::npos) {
    out.reasoning += held_.substr(0, end);
    out.content += held_.substr(end + format_.end.size());
    held_.clear();
    state_ = State::kContent;
    return;
  }
  const size_t keep = partial_marker_suffix(held_, format_.end);
  out.reasoning += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

ReasoningDelta ReasoningParser::push(std::string_view text) {
  ReasoningDelta out;
  if (state_ == State::kContent) {
    out.content = text;
    return out;
  }
  held_ += text;
  if ((state_ == State::kStart || state_ == State::kReasoningStart) && !decide_start(out)) return out;
  if (state_ == State::kReasoning) scan_reasoning(out);
  if (state_ == State::kContent && !held_.empty()) {
    out.content += held_;
    held_.clear();
  }
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  if (state_ == State::kStart || state_ == State::kContent) {
    out.content = std::move(held_);
  } else {
    out.reasoning = std::move(held_);
  }
  held_.clear();
  state_ = State::kContent;
  return out;
}

}  // namespace spindle::chat
