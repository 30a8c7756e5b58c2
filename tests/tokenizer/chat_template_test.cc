#include "tokenizer/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "golden.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace spindle::tokenizer {
namespace {

using testing::golden_dir;
using testing::read_json;

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> messages;
  for (const auto& m : j) messages.push_back({m.at("role"), m.at("content")});
  return messages;
}

struct Family {
  const char* name;      // key in chat_templates.json
  const char* model;     // a golden model folder of that family
  ChatFormat format;
};

constexpr Family kFamilies[] = {
    {"llama", "llama-gqa-f32", ChatFormat::kLlama3},
    {"qwen", "qwen2-tied-f32", ChatFormat::kChatMl},
    {"mistral", "mistral-f32", ChatFormat::kLlama2},
};

TEST(ChatTemplateTest, RecognisesAndRendersLikeHuggingFace) {
  const auto golden = read_json(golden_dir() / "chat_templates.json");
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    const auto& g = golden.at(f.name);
    EXPECT_EQ(recognise_chat_format(g.at("template").get<std::string>()), f.format);
    const Tokenizer tok = Tokenizer::load(golden_dir() / f.model);
    EXPECT_EQ(tok.chat_template(), g.at("template").get<std::string>());
    const ChatTemplate chat = ChatTemplate::for_tokenizer(tok);
    EXPECT_EQ(chat.format(), f.format);
    EXPECT_EQ(chat.render(messages_of(g.at("messages")), true), g.at("rendered").get<std::string>());
  }
}

TEST(ChatTemplateTest, RenderedPromptEncodesWithoutADoubleBos) {
  const auto golden = read_json(golden_dir() / "chat_templates.json");
  const Tokenizer tok = Tokenizer::load(golden_dir() / "llama-gqa-f32");
  const std::string prompt = ChatTemplate::for_tokenizer(tok).render(messages_of(golden.at("llama").at("messages")));
  const auto ids = tok.encode(prompt, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *tok.bos_id());
  EXPECT_NE(ids[1], *tok.bos_id());
}

TEST(ChatTemplateTest, ExplicitChoiceOverridesRecognition) {
  const Tokenizer tok = Tokenizer::load(golden_dir() / "qwen2-tied-f32");
  const ChatTemplate chat = ChatTemplate::for_tokenizer(tok, parse_chat_format("llama3"));
  EXPECT_EQ(chat.format(), ChatFormat::kLlama3);
  const std::vector<ChatMessage> messages = {{"user", "  hi  "}};
  EXPECT_EQ(chat.render(messages, false), "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
  EXPECT_EQ(parse_chat_format("mistral"), ChatFormat::kLlama2);
  EXPECT_EQ(to_string(ChatFormat::kChatMl), "chatml");
}

TEST(ChatTemplateTest, Llama2FoldsTheSystemMessageIntoTheUserTurn) {
  const ChatTemplate chat(ChatFormat::kLlama2, "<s>", "</s>");
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(chat.render(messages), "<s>[INST] Be brief.\n\nHi [/INST]");
  const std::vector<ChatMessage> bad = {{"tool", "x"}};
  EXPECT_THROW(chat.render(bad), Error);
}

TEST(ChatTemplateTest, UnrecognisedTemplateListsSupportedOnes) {
  try {
    recognise_chat_format("{% for m in messages %}<|user|>{{ m.content }}{% endfor %}");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("chatml"));
    EXPECT_THAT(e.message(), ::testing::HasSubstr("llama3"));
    EXPECT_THAT(e.message(), ::testing::HasSubstr("llama2"));
  }
  EXPECT_THROW(recognise_chat_format(""), Error);
  try {
    parse_chat_format("vicuna");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("chatml, llama3, llama2"));
  }
}

TEST(ChatTemplateTest, TemplateFromOlderTokenizerConfig) {
  const Tokenizer reference = Tokenizer::load(golden_dir() / "qwen2-tied-f32");
  nlohmann::json config = read_json(golden_dir() / "qwen2-tied-f32" / "tokenizer_config.json");
  config["chat_template"] = reference.chat_template();
  const Tokenizer tok = Tokenizer::from_files(
      {.tokenizer_json = read_text_file(golden_dir() / "qwen2-tied-f32" / "tokenizer.json"),
       .tokenizer_config_json = config.dump()});
  EXPECT_EQ(tok.chat_template(), reference.chat_template());
  EXPECT_EQ(ChatTemplate::for_tokenizer(tok).format(), ChatFormat::kChatMl);
}

// The model's own template through the Jinja engine gives Hugging Face's rendering (the goldens
// are transformers' apply_chat_template output).
TEST(ChatTemplateTest, ModelJinjaTemplateRendersLikeHuggingFace) {
  const auto golden = read_json(golden_dir() / "chat_templates.json");
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.name);
    const auto& g = golden.at(f.name);
    const Tokenizer tok = Tokenizer::load(golden_dir() / f.model);
    const ChatTemplate chat = ChatTemplate::from_model(tok);
    EXPECT_EQ(chat.format(), ChatFormat::kJinja);
    EXPECT_THAT(chat.source(), ::testing::HasSubstr(f.model));
    EXPECT_EQ(chat.render(messages_of(g.at("messages")), true), g.at("rendered").get<std::string>());
  }
}

Tokenizer tokenizer_with_config(const nlohmann::json& chat_template) {
  nlohmann::json config = read_json(golden_dir() / "qwen2-tied-f32" / "tokenizer_config.json");
  config["chat_template"] = chat_template;
  return Tokenizer::from_files(
      {.tokenizer_json = read_text_file(golden_dir() / "qwen2-tied-f32" / "tokenizer.json"),
       .tokenizer_config_json = config.dump()},
      "models/q");
}

TEST(ChatTemplateTest, TemplateSyntaxErrorNamesFileAndLine) {
  const Tokenizer tok = tokenizer_with_config("{% for m in messages %}\n{{ m.content + }}\n{% endfor %}");
  try {
    ChatTemplate::from_model(tok);
    FAIL() << "expected a syntax error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("models/q/tokenizer_config.json chat_template line 2"));
  }
}

TEST(ChatTemplateTest, ToolUseTemplateIsPreferredWithTools) {
  const Tokenizer tok = tokenizer_with_config(nlohmann::json::array(
      {{{"name", "default"}, {"template", "D{{ messages | length }}"}},
       {{"name", "tool_use"}, {"template", "T{{ tools | length }}{{ tools[0].function.name }}"}}}));
  const ChatTemplate chat = ChatTemplate::from_model(tok);
  EXPECT_TRUE(chat.has_tool_use_template());
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  EXPECT_EQ(chat.render(messages), "D1");
  nlohmann::ordered_json context = {{"messages", nlohmann::ordered_json::array()}};
  EXPECT_EQ(chat.render_context(context), "D0");
  context["tools"] = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(chat.render_context(context), "T1f");
}

TEST(ChatTemplateTest, RenderErrorsAreErrorsWithTheTemplatesMessage) {
  const Tokenizer tok = tokenizer_with_config(
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok");
  const ChatTemplate chat = ChatTemplate::from_model(tok);
  const std::vector<ChatMessage> user = {{"user", "hi"}};
  EXPECT_EQ(chat.render(user), "ok");
  const std::vector<ChatMessage> system = {{"system", "x"}};
  try {
    chat.render(system);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "System role not supported");
  }
}

TEST(ChatTemplateTest, ChoiceIsABuiltInOrAJinjaFile) {
  const Tokenizer tok = Tokenizer::load(golden_dir() / "qwen2-tied-f32");
  EXPECT_EQ(ChatTemplate::from_choice(tok, "llama3").format(), ChatFormat::kLlama3);
  const auto path = std::filesystem::temp_directory_path() / "spindle_chat_template_test.jinja";
  std::ofstream(path) << "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}\n";
  const ChatTemplate chat = ChatTemplate::from_choice(tok, path.string());
  EXPECT_EQ(chat.format(), ChatFormat::kJinja);
  EXPECT_EQ(chat.source(), path.string());
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  EXPECT_EQ(chat.render(messages), "[user]hi");
  std::filesystem::remove(path);
  try {
    ChatTemplate::from_choice(tok, "vicuna");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("chatml, llama3, llama2"));
    EXPECT_THAT(e.message(), ::testing::HasSubstr("Jinja file"));
  }
}

}  // namespace
}  // namespace spindle::tokenizer
