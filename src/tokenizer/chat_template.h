// Chat prompt formats, recognised from the model's Jinja chat template by signature
// substrings (Spindle does not run Jinja):
//   chatml  "<|im_start|>"        Qwen, many others
//   llama3  "<|start_header_id|>" Llama-3
//   llama2  "[INST]"              Llama-2 / Mistral, rendered in Mistral's form:
//           <s>[INST] user [/INST]assistant</s>[INST] ... (a system message is prepended
//           to the next user message, separated by a blank line)
// Template-specific extras (default system prompts, tools) are not reproduced.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::tokenizer {

class Tokenizer;

enum class ChatFormat { kChatMl, kLlama3, kLlama2 };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (chatml/llama3 accept any role)
  std::string content;
};

std::string_view to_string(ChatFormat format);
// "chatml", "llama3", "llama2" (also "mistral"); anything else is an error listing them.
ChatFormat parse_chat_format(std::string_view name);
// Recognises a template's text; an unrecognised (or empty) template is an error that lists
// the supported formats and how to choose one explicitly.
ChatFormat recognise_chat_format(std::string_view template_text);

class ChatTemplate {
 public:
  ChatTemplate(ChatFormat format, std::string bos_token, std::string eos_token);
  // The tokenizer's template recognised, unless `format` chooses one explicitly.
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer, std::optional<ChatFormat> format = {});

  ChatFormat format() const { return format_; }
  // The prompt text (with BOS text where the format has one): encode it with
  // add_special_tokens = false. add_generation_prompt opens an assistant turn.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;

 private:
  std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama2(std::span<const ChatMessage> messages) const;

  ChatFormat format_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace spindle::tokenizer
