#include "tokenizer/chat_template.h"

#include "jinja/template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace spindle::tokenizer {
namespace {

constexpr std::string_view kSupported = "chatml (<|im_start|>), llama3 (<|start_header_id|>), llama2 ([INST])";

// Jinja's trim filter (Python str.strip()) for ASCII whitespace.
std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

}  // namespace

std::string_view to_string(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl:
      return "chatml";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kLlama2:
      return "llama2";
    case ChatFormat::kJinja:
      return "jinja";
  }
  return "unknown";
}

ChatFormat parse_chat_format(std::string_view name) {
  if (name == "chatml") return ChatFormat::kChatMl;
  if (name == "llama3") return ChatFormat::kLlama3;
  if (name == "llama2" || name == "mistral") return ChatFormat::kLlama2;
  SPINDLE_FAIL("unknown chat template '{}': supported are chatml, llama3, llama2", name);
}

ChatFormat recognise_chat_format(std::string_view template_text) {
  SPINDLE_CHECK(!template_text.empty(),
                "the model has no chat template (no chat_template.jinja, no chat_template in "
                "tokenizer_config.json); choose one explicitly: {}",
                kSupported);
  if (template_text.find("<|im_start|>") != std::string_view::npos) return ChatFormat::kChatMl;
  if (template_text.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::kLlama3;
  if (template_text.find("[INST]") != std::string_view::npos) return ChatFormat::kLlama2;
  SPINDLE_FAIL("the model's chat template is not one Spindle recognises; supported: {}; choose one "
               "explicitly if the model follows one of them",
               kSupported);
}

ChatTemplate::ChatTemplate(ChatFormat format, std::string bos_token, std::string eos_token)
    : format_(format), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {}

ChatTemplate ChatTemplate::from_jinja(std::string_view text, std::string source, std::string bos_token,
                                      std::string eos_token, std::string_view tool_use_text) {
  ChatTemplate t(ChatFormat::kJinja, std::move(bos_token), std::move(eos_token));
  t.jinja_ = std::make_shared<const jinja::Template>(text, source);
  if (!tool_use_text.empty())
    t.jinja_tool_use_ = std::make_shared<const jinja::Template>(tool_use_text, source + " (tool_use)");
  t.source_ = std::move(source);
  t.text_ = text;
  t.tool_use_text_ = tool_use_text;
  return t;
}

ChatTemplate ChatTemplate::from_model(const Tokenizer& tokenizer) {
  SPINDLE_CHECK(!tokenizer.chat_template().empty(),
                "the model has no chat template (no chat_template.jinja, no chat_template in "
                "tokenizer_config.json); choose one with --chat-template: chatml, llama3, llama2 or a "
                "path to a Jinja file");
  return from_jinja(tokenizer.chat_template(), tokenizer.chat_template_source(), tokenizer.bos_token(),
                    tokenizer.eos_token(), tokenizer.tool_use_chat_template());
}

ChatTemplate ChatTemplate::from_choice(const Tokenizer& tokenizer, const std::string& choice) {
  if (choice == "chatml" || choice == "llama3" || choice == "llama2" || choice == "mistral")
    return for_tokenizer(tokenizer, parse_chat_format(choice));
  std::error_code ec;
  SPINDLE_CHECK(std::filesystem::is_regular_file(choice, ec),
                "--chat-template '{}' is neither a built-in template (chatml, llama3, llama2) nor a Jinja file",
                choice);
  std::ifstream in(choice, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  SPINDLE_CHECK(in.good() || in.eof(), "--chat-template: cannot read '{}'", choice);
  return from_jinja(text.str(), choice, tokenizer.bos_token(), tokenizer.eos_token());
}

std::string ChatTemplate::render_context(nlohmann::ordered_json context) const {
  SPINDLE_CHECK(jinja_ != nullptr, "the {} chat template is built in, not Jinja: it renders messages only",
                to_string(format_));
  SPINDLE_CHECK(context.is_object(), "a chat template's context is a JSON object");
  for (const char* key : {"tools", "documents"})
    if (!context.contains(key)) context[key] = nullptr;
  if (!context.contains("add_generation_prompt")) context["add_generation_prompt"] = false;
  if (!context.contains("bos_token")) context["bos_token"] = bos_token_;
  if (!context.contains("eos_token")) context["eos_token"] = eos_token_;
  const auto& tools = context["tools"];
  const bool with_tools = tools.is_array() ? !tools.empty() : !tools.is_null();
  const jinja::Template& t = with_tools && jinja_tool_use_ ? *jinja_tool_use_ : *jinja_;
  return t.render(context);
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tokenizer, std::optional<ChatFormat> format) {
  const ChatFormat chosen = format ? *format : recognise_chat_format(tokenizer.chat_template());
  return ChatTemplate(chosen, tokenizer.bos_token(), tokenizer.eos_token());
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  if (jinja_) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
    return render_context({{"messages", std::move(list)}, {"add_generation_prompt", add_generation_prompt}});
  }
  switch (format_) {
    case ChatFormat::kChatMl:
      return render_chatml(messages, add_generation_prompt);
    case ChatFormat::kLlama3:
      return render_llama3(messages, add_generation_prompt);
    case ChatFormat::kLlama2:
      return render_llama2(messages);
    case ChatFormat::kJinja:
      break;
  }
  SPINDLE_FAIL("unknown chat format");
}

std::string ChatTemplate::render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out = bos_token_;
  for (const ChatMessage& m : messages) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string ChatTemplate::render_llama2(std::span<const ChatMessage> messages) const {
  std::string out = bos_token_;
  std::string system;  // waiting for the next user message
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += system.empty() ? m.content : "\n\n" + m.content;
    } else if (m.role == "user") {
      out += "[INST] ";
      if (!system.empty()) out += system + "\n\n";
      system.clear();
      out += m.content + " [/INST]";
    } else if (m.role == "assistant") {
      out += m.content + eos_token_;
    } else {
      SPINDLE_FAIL("chat role '{}' is not supported by the llama2 chat template (system, user, assistant)",
                   m.role);
    }
  }
  SPINDLE_CHECK(system.empty(), "the llama2 chat template needs a user message after a system message");
  return out;
}

}  // namespace spindle::tokenizer
