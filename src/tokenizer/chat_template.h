// Chat prompts. A model's own Jinja chat template (chat_template.jinja, or tokenizer_config.json's
// chat_template, a string or named templates: `default`, and `tool_use` preferred when tools are
// given, as transformers does) runs in Spindle's Jinja engine (src/jinja) in transformers'
// environment: ChatTemplate::from_model. `--chat-template` takes a built-in name or a path to a
// Jinja file: ChatTemplate::from_choice.
// The built-in formats, also recognised from a template's text by signature substrings
// (for_tokenizer), remain for folders without a template:
//   chatml  "<|im_start|>"        Qwen, many others
//   llama3  "<|start_header_id|>" Llama-3
//   llama2  "[INST]"              Llama-2 / Mistral, rendered in Mistral's form:
//           <s>[INST] user [/INST]assistant</s>[INST] ... (a system message is prepended
//           to the next user message, separated by a blank line)
// The built-ins do not reproduce template-specific extras (default system prompts, tools).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spindle::jinja {
class Template;
}  // namespace spindle::jinja

namespace spindle::tokenizer {

class Tokenizer;

enum class ChatFormat { kChatMl, kLlama3, kLlama2, kJinja };

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
  // A Jinja template; `source` names where its text came from (errors name it and the line).
  // A syntax error is a jinja::TemplateError (a spindle::Error) of kind kSyntax.
  static ChatTemplate from_jinja(std::string_view text, std::string source, std::string bos_token,
                                 std::string eos_token, std::string_view tool_use_text = {});
  // The model's own Jinja template(s); an error when the model folder has none.
  static ChatTemplate from_model(const Tokenizer& tokenizer);
  // `--chat-template`: a built-in name (chatml, llama3, llama2 / mistral) or a path to a Jinja
  // file; anything else is an error listing the names.
  static ChatTemplate from_choice(const Tokenizer& tokenizer, const std::string& choice);
  // The tokenizer's template recognised as a built-in, unless `format` chooses one explicitly.
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer, std::optional<ChatFormat> format = {});

  ChatFormat format() const { return format_; }
  // Where a Jinja template came from ("" for the built-ins).
  const std::string& source() const { return source_; }
  bool has_tool_use_template() const { return jinja_tool_use_ != nullptr; }
  // The Jinja source texts ("" for the built-ins and for no tool_use template): what the output
  // formats are detected from.
  const std::string& text() const { return text_; }
  const std::string& tool_use_text() const { return tool_use_text_; }
  // The formats the model's output is read in, chosen at start-up (--reasoning-parser,
  // --tool-call-parser, or detected from the template's text): src/chat's names, "" for none.
  void set_output_parsers(std::string reasoning, std::string tool_calls) {
    reasoning_parser_ = std::move(reasoning);
    tool_call_parser_ = std::move(tool_calls);
  }
  const std::string& reasoning_parser() const { return reasoning_parser_; }
  const std::string& tool_call_parser() const { return tool_call_parser_; }
  // The prompt text (with BOS text where the format has one): encode it with
  // add_special_tokens = false. add_generation_prompt opens an assistant turn.
  // A template's failure (raise_exception, an undefined value used, a bound exceeded) is a
  // spindle::Error (jinja::TemplateError) whose message says why: a request's 400.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;
  // Jinja templates only: renders with the whole context apply_chat_template passes: `messages`
  // as JSON (tool calls, tool results...), `tools`, `documents`, `add_generation_prompt` and
  // chat_template_kwargs such as enable_thinking. bos_token / eos_token are added, and tools /
  // documents set to null when absent (as transformers passes them). The `tool_use` template
  // renders when tools are present and the model has one.
  std::string render_context(nlohmann::ordered_json context) const;

 private:
  std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render_llama2(std::span<const ChatMessage> messages) const;

  ChatFormat format_;
  std::string bos_token_;
  std::string eos_token_;
  std::string source_;
  std::string text_;
  std::string tool_use_text_;
  std::string reasoning_parser_;
  std::string tool_call_parser_;
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const jinja::Template> jinja_tool_use_;
};

}  // namespace spindle::tokenizer
