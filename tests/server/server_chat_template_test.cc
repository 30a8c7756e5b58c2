// Chat templates end to end: `spindle serve --chat-template FILE.jinja` renders requests with
// Spindle's Jinja engine; a template's raise_exception is a 400 naming `messages` with the
// template's message, and a template with a syntax error stops start-up naming the file and line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server_checks.h"
#include "spindle_server.h"
#include "support/spindle_binary.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

std::string write_template(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".jinja");
  std::ofstream(path) << text;
  return path.string();
}

TEST(ServerChatTemplateTest, JinjaFileRendersAndItsRaiseIsA400) {
  const std::string path = write_template(
      "spindle_no_system",
      "{%- for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
      "<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
  std::string error;
  auto server = SpindleServer::start({"--chat-template", path}, &error);
  ASSERT_NE(server, nullptr) << error;
  EXPECT_THAT(server->log(), ::testing::HasSubstr(path + " (Jinja)"));
  auto client = server->client(60, "");
  const json ok = {{"messages", {{{"role", "user"}, {"content", "  In the beginning  "}}}},
                   {"max_tokens", 4}, {"temperature", 0}};
  const JsonReply r = post(*client, "/v1/chat/completions", ok);
  EXPECT_EQ(r.status, 200) << r.body;
  // The prompt is the file's rendering (content trimmed), written out here by hand.
  const auto tok = tokenizer::Tokenizer::load(std::filesystem::path(SPINDLE_SOURCE_DIR) / "models" / "kjv-tiny");
  const std::string expected = "<|im_start|>user\nIn the beginning<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(r.json["usage"].value("prompt_tokens", 0), static_cast<int>(tok.encode(expected, false).size())) << r.body;
  const json bad = {{"messages", {{{"role", "system"}, {"content", "x"}}, {{"role", "user"}, {"content", "y"}}}},
                    {"max_tokens", 4}};
  const JsonReply e = post(*client, "/v1/chat/completions", bad);
  EXPECT_EQ(e.status, 400) << e.body;
  EXPECT_EQ(e.json["error"].value("param", ""), "messages") << e.body;
  EXPECT_THAT(e.json["error"].value("message", ""), ::testing::HasSubstr("System role not supported")) << e.body;
  std::filesystem::remove(path);
}

TEST(ServerChatTemplateTest, SyntaxErrorStopsStartUpNamingFileAndLine) {
  const std::string path = write_template("spindle_bad", "{% for m in messages %}\n{{ m.content + }}\n{% endfor %}");
  const ChildResult child = run_child({spindle_binary(), "serve", "--port", "0", "--no-backend-cache", "--chat-template", path},
                                      std::chrono::seconds(120));
  EXPECT_FALSE(child.timed_out) << child.err;
  EXPECT_NE(child.exit_code, 0) << child.err;
  EXPECT_THAT(child.err, ::testing::HasSubstr(path + " line 2")) << child.err;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace spindle::testing
