// `spindle serve model.gguf` with nothing beside the file: models/kjv-tiny written as one BF16 GGUF
// file (tests/support/kjv_gguf.h: weights, tokenizer, stop ids and the Jinja chat template in its
// metadata). Truth: the same greedy chat completion served from the Hugging Face folder, and the
// prompt the folder's template renders (written out by hand below).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "server_checks.h"
#include "spindle_server.h"
#include "support/kjv_gguf.h"
#include "support/spindle_binary.h"
#include "tokenizer/tokenizer.h"

namespace spindle::testing {
namespace {

using nlohmann::json;

const std::filesystem::path kKjvDir = std::filesystem::path(SPINDLE_SOURCE_DIR) / "models" / "kjv-tiny";

JsonReply chat(const std::vector<std::string>& args, const json& request, std::string* log) {
  std::string error;
  auto server = SpindleServer::start(args, &error);
  if (server == nullptr) {
    ADD_FAILURE() << error;
    return {};
  }
  auto client = server->client(60, "");
  const JsonReply r = post(*client, "/v1/chat/completions", request);
  *log = server->log();
  return r;
}

TEST(ServerGgufTest, ChatCompletionFromTheFileAloneEqualsTheFolder) {
  const std::string path = temp_path("kjv_tiny") + ".gguf";
  write_kjv_tiny_gguf(kKjvDir, path, /*f32=*/false);
  const json request = {{"messages", {{{"role", "user"}, {"content", "In the beginning"}}}},
                        {"max_tokens", 12}, {"temperature", 0}};
  std::string gguf_log, folder_log;
  const JsonReply from_file = chat({path}, request, &gguf_log);
  const JsonReply from_folder = chat({kKjvDir.string()}, request, &folder_log);
  ASSERT_EQ(from_file.status, 200) << from_file.body << gguf_log;
  ASSERT_EQ(from_folder.status, 200) << from_folder.body;
  EXPECT_THAT(gguf_log, ::testing::HasSubstr(path + ": tokenizer.chat_template (Jinja)"));
  EXPECT_EQ(from_file.json["choices"][0]["message"]["content"], from_folder.json["choices"][0]["message"]["content"]);
  EXPECT_EQ(from_file.json["choices"][0]["finish_reason"], from_folder.json["choices"][0]["finish_reason"]);
  EXPECT_GT(from_file.json["usage"].value("completion_tokens", 0), 0) << from_file.body;
  // The prompt is the file's template rendering, written out here by hand.
  const auto tok = tokenizer::Tokenizer::load(kKjvDir);
  const std::string expected = "<|im_start|>user\nIn the beginning<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(from_file.json["usage"].value("prompt_tokens", 0), static_cast<int>(tok.encode(expected, false).size()))
      << from_file.body;
  std::filesystem::remove(path);
}

TEST(ServerGgufTest, TemplateThatDoesNotParseStopsStartUpNamingTheFileAndFlag) {
  const std::string dir = temp_path("kjv_bad_template");
  std::filesystem::create_directories(dir);
  std::filesystem::copy(kKjvDir, dir, std::filesystem::copy_options::recursive);
  {
    std::ofstream(std::filesystem::path(dir) / "chat_template.jinja") << "{% for m in messages %}{{ m.content + }}";
  }
  const std::string path = dir + ".gguf";
  write_kjv_tiny_gguf(dir, path, /*f32=*/false);
  const ChildResult child =
      run_child({spindle_binary(), "serve", path, "--port", "0", "--no-backend-cache"}, std::chrono::seconds(120));
  EXPECT_NE(child.exit_code, 0) << child.err;
  EXPECT_THAT(child.err, ::testing::HasSubstr(path + ": tokenizer.chat_template")) << child.err;
  EXPECT_THAT(child.err, ::testing::HasSubstr("--chat-template")) << child.err;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace spindle::testing
