// The reasoning parser over whole texts, over every split of a text into two and three pieces,
// and over the pieces a real tokenizer's incremental detokenizer produces (the golden Qwen3
// folder's tokenizer has no <think> token, so each marker spans several tokens). Expected
// values are written out by hand from the format's definition.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "chat/reasoning_parser.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace spindle::chat {
namespace {

struct Sorted {
  std::string reasoning;
  std::string content;
  bool operator==(const Sorted&) const = default;
};

void add(Sorted& s, const ReasoningDelta& d) {
  s.reasoning += d.reasoning;
  s.content += d.content;
}

Sorted run(const std::vector<std::string>& pieces, bool opened) {
  ReasoningParser p(find_reasoning_format("qwen3"), opened);
  Sorted s;
  for (const auto& piece : pieces) add(s, p.push(piece));
  add(s, p.finish());
  return s;
}

// Every split into 1, 2 and 3 pieces gives `expected`.
void expect_every_split(const std::string& text, bool opened, const Sorted& expected) {
  EXPECT_EQ(run({text}, opened), expected) << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(run({text.substr(0, i), text.substr(i)}, opened), expected) << text << " split at " << i;
    for (size_t j = i; j <= text.size(); ++j) {
      ASSERT_EQ(run({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, opened), expected)
          << text << " split at " << i << ", " << j;
    }
  }
}

TEST(ReasoningParserTest, OpeningMarkerInTheOutput) {
  expect_every_split("<think>\nThe user asks.\n</think>\n\nParis.", false, {"\nThe user asks.\n", "\n\nParis."});
  expect_every_split("  \n<think>x</think>y", false, {"x", "y"});
}

TEST(ReasoningParserTest, PromptOpenedTheSection) {
  expect_every_split("Hmm, 2+2.\n</think>\n\n4", true, {"Hmm, 2+2.\n", "\n\n4"});
  // A model that repeats the prompt's opening marker: dropped.
  expect_every_split("<think>a</think>b", true, {"a", "b"});
}

TEST(ReasoningParserTest, NoSectionIsAllContent) {
  expect_every_split("Paris is the capital. <think> is not at the start", false,
                     {"", "Paris is the capital. <think> is not at the start"});
  expect_every_split("<thin", false, {"", "<thin"});
  expect_every_split("", false, {"", ""});
}

TEST(ReasoningParserTest, TruncatedInsideTheSectionLeavesContentEmpty) {
  expect_every_split("<think>still thinking </thi", false, {"still thinking </thi", ""});
  expect_every_split("still thinking", true, {"still thinking", ""});
}

TEST(ReasoningParserTest, SecondEndMarkerIsContent) {
  expect_every_split("a</think>b</think>c", true, {"a", "b</think>c"});
}

TEST(ReasoningParserTest, HoldsOnlyWhatMayBeginAMarker) {
  ReasoningParser p(find_reasoning_format("deepseek_r1"), true);
  EXPECT_EQ(p.push("abc</").reasoning, "abc");
  EXPECT_EQ(p.push("x").reasoning, "</x");
  const ReasoningDelta d = p.push("</think>done");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "done");
  EXPECT_EQ(p.push(" more").content, " more");
}

TEST(ReasoningParserTest, RealTokenizerPieces) {
  const auto tok = tokenizer::Tokenizer::load(std::filesystem::path(SPINDLE_SOURCE_DIR) / "tests" / "golden" /
                                              "qwen3-qknorm-f32");
  const std::string text = "<think>\nWe add two and two.\n</think>\n\nThe answer is 4.";
  const auto ids = tok.encode(text, false);
  ASSERT_GT(ids.size(), 8u);
  tokenizer::IncrementalDetokenizer detok(tok, true);
  std::vector<std::string> pieces;
  for (int id : ids) pieces.push_back(detok.push(id));
  pieces.push_back(detok.finish());
  // The markers are split over several tokens' pieces.
  EXPECT_THAT(pieces, ::testing::Not(::testing::Contains("</think>")));
  EXPECT_EQ(run(pieces, false), (Sorted{"\nWe add two and two.\n", "\n\nThe answer is 4."}));
}

TEST(ReasoningParserTest, PromptOpensReasoning) {
  const ReasoningFormat& f = find_reasoning_format("deepseek_r1");
  EXPECT_TRUE(prompt_opens_reasoning(f, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "<|im_start|>assistant\n"));
  EXPECT_TRUE(prompt_opens_reasoning(f, "<think>old</think> user <think>"));
}

TEST(ReasoningParserTest, NamesAndDetection) {
  EXPECT_EQ(find_reasoning_format("qwen3").end, "</think>");
  try {
    find_reasoning_format("granite");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("deepseek_r1, qwen3"));
  }
  EXPECT_NE(detect_reasoning_format("{{ '<think>' }} ... {{ '</think>' }}"), nullptr);
  EXPECT_EQ(detect_reasoning_format("<|im_start|>assistant"), nullptr);
}

}  // namespace
}  // namespace spindle::chat
