#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "golden.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace spindle::tokenizer {
namespace {

using testing::golden_tokenizer_dir;
using testing::read_json;

// Feeds ids one at a time; checks every chunk is valid UTF-8 and returns their concatenation.
std::string stream(const Tokenizer& tok, const std::vector<TokenId>& ids, bool skip_special, size_t* num_chunks) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::string all;
  *num_chunks = 0;
  for (const TokenId id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_EQ(find_invalid_utf8(chunk), kValidUtf8) << "chunk after id " << id;
    if (!chunk.empty()) ++*num_chunks;
    all += chunk;
  }
  const std::string tail = detok.finish();
  EXPECT_TRUE(tail.empty()) << "valid ids leave no held-back bytes";
  all += tail;
  EXPECT_EQ(detok.num_tokens(), ids.size());
  return all;
}

class IncrementalDetokenizerTest : public ::testing::TestWithParam<const char*> {};

TEST_P(IncrementalDetokenizerTest, StreamingEqualsGoldenDecode) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir(GetParam()));
  const auto golden = read_json(golden_tokenizer_dir(GetParam()) / "golden.json");
  int multibyte_cases = 0;
  size_t multibyte_ids = 0;
  size_t multibyte_chunks = 0;
  for (const auto& s : golden.at("strings")) {
    const std::string text = s.at("text");
    const auto ids = s.at("ids").get<std::vector<TokenId>>();
    size_t num_chunks = 0;
    EXPECT_EQ(stream(tok, ids, false, &num_chunks), s.at("decoded").get<std::string>()) << "text: " << text;
    EXPECT_EQ(stream(tok, ids, true, &num_chunks), tok.decode(ids, true)) << "text: " << text;
    // Emoji and CJK split across byte tokens must have been held back at least once.
    if (text.find("emoji") != std::string::npos || text.find("CJK") != std::string::npos) {
      ++multibyte_cases;
      multibyte_ids += ids.size();
      multibyte_chunks += num_chunks;
    }
  }
  EXPECT_EQ(multibyte_cases, 2);
  EXPECT_LT(multibyte_chunks, multibyte_ids);
}

TEST_P(IncrementalDetokenizerTest, WithSpecialTokensPrefix) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir(GetParam()));
  const auto ids = tok.encode("  Hello 😀 world", true);
  size_t num_chunks = 0;
  EXPECT_EQ(stream(tok, ids, true, &num_chunks), tok.decode(ids, true));
  EXPECT_EQ(stream(tok, ids, false, &num_chunks), tok.decode(ids, false));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, IncrementalDetokenizerTest, ::testing::ValuesIn(testing::kGoldenTokenizers),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(IncrementalDetokenizerSentencePieceTest, OnlyTheFirstTokenLosesItsSpace) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir("metaspace"));
  const auto ids = tok.encode("Hello world and more", false);
  ASSERT_GE(ids.size(), 3u);
  IncrementalDetokenizer detok(tok);
  std::string all;
  for (const TokenId id : ids) all += detok.push(id);
  all += detok.finish();
  EXPECT_EQ(all, "Hello world and more");

  // A skipped BOS first: the strip still applies to the first real text.
  std::vector<TokenId> with_bos = tok.encode("Hello world", true);
  ASSERT_EQ(with_bos.front(), *tok.token_to_id("<s>"));
  EXPECT_EQ(tok.decode(with_bos, true), "Hello world");
  EXPECT_EQ(tok.decode(with_bos, false), "<s> Hello world");
}

TEST(IncrementalDetokenizerSentencePieceTest, HeldBytesOfACutCharacterFlushAsReplacement) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir("metaspace"));
  // U+4E2D as byte-fallback tokens, stopped after two of its three bytes.
  const std::vector<TokenId> ids = {*tok.token_to_id("<0xE4>"), *tok.token_to_id("<0xB8>")};
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_EQ(detok.push(ids[1]), "");
  EXPECT_EQ(detok.finish(), "\uFFFD");
  EXPECT_EQ(tok.decode(ids), "\uFFFD");
}

}  // namespace
}  // namespace spindle::tokenizer
