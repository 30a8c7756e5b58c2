// Reasoning content: a model's thinking section (`<think>...</think>` for DeepSeek-R1 and its
// distills, Qwen3, QwQ) separated from its answer, as message.reasoning_content and streamed as
// delta.reasoning_content (the vLLM / DeepSeek API field).
//
// The parser reads a choice's output text as it is produced, in pieces that may split a marker
// anywhere (`</th` + `ink>`), and sorts every byte into reasoning or content:
//   - when the rendered prompt already opened the section (it ends inside `<think>`, as the R1
//     distills' and thinking templates' generation prompts do), output up to the end marker is
//     reasoning, with no opening marker needed (one at the very start is dropped);
//   - otherwise a start marker at the start of the output (after whitespace) opens it; anything
//     else makes the whole output content (Qwen3 with enable_thinking false: the template wrote
//     the empty block into the prompt);
//   - the markers themselves are in neither field; text after the end marker is content, as is;
//   - output that ends inside the section (truncated by max_tokens) leaves content empty.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace spindle::chat {

struct ReasoningFormat {
  std::string_view name;   // the --reasoning-parser name
  std::string_view start;  // opens the section
  std::string_view end;    // closes it
};

// The formats, by the names vLLM gives them: deepseek_r1, qwen3 (both `<think>` / `</think>`).
std::span<const ReasoningFormat> reasoning_formats();
// The format named `name`; an error listing the names (and "none", "auto") for any other.
const ReasoningFormat& find_reasoning_format(std::string_view name);
// The format a chat template's text implies: one whose start and end markers both occur in it
// (the first in reasoning_formats() order), or null when none does.
const ReasoningFormat* detect_reasoning_format(std::string_view template_text);
// Whether `prompt` ends inside an open section: its last start marker comes after its last end marker.
bool prompt_opens_reasoning(const ReasoningFormat& format, std::string_view prompt);

// One piece of output sorted into the two fields.
struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  ReasoningParser(const ReasoningFormat& format, bool opened_by_prompt);

  // The next piece of output; returns what can be told apart now (bytes that may begin a marker
  // are held back until the next piece or finish()).
  ReasoningDelta push(std::string_view text);
  // The output ended: releases what is held.
  ReasoningDelta finish();

 private:
  enum class State { kStart, kReasoningStart, kReasoning, kContent };
  // Decides kStart / kReasoningStart once enough of the output is known; false while undecided.
  bool decide_start(ReasoningDelta& out);
  void scan_reasoning(ReasoningDelta& out);

  const ReasoningFormat& format_;
  State state_;
  std::string held_;  // bytes not yet sorted
};

}  // namespace spindle::chat
