// The text of a token in a logprob entry (server/completion_handler.h): a SentencePiece token
// keeps its leading space (decoding the token alone strips it, as the start of a text), and a
// byte-level token its own bytes; the texts of a sequence's tokens concatenate to its decoding
// (up to the decoder's strip of the very first space), which is what text_offset counts.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/completion_handler.h"
#include "tokenizer/tokenizer.h"

namespace spindle::server {
namespace {

std::filesystem::path tokenizer_dir(const std::string& name) {
  return std::filesystem::path(SPINDLE_FIXTURES_DIR) / ".." / "golden" / "tokenizers" / name;
}

TEST(LogprobTextTest, SentencePieceTokensKeepTheirLeadingSpace) {
  const auto tok = tokenizer::Tokenizer::load(tokenizer_dir("metaspace"));
  const std::string text = "And God said, Let there be light";
  const auto ids = tok.encode(text, /*add_special_tokens=*/false);
  ASSERT_GT(ids.size(), 3u);
  std::string joined;
  for (TokenId id : ids) joined += logprob_token_text(tok, id);
  EXPECT_EQ(joined, " " + text);  // every word's token starts with its space, the first one too
  // Every token that begins a word ("▁God") keeps its space; decoding it alone strips that space
  // (the decoder's strip of the start of a text): the bug this replaced.
  int num_word_starts = 0;
  for (size_t i = 1; i < ids.size(); ++i) {
    if (!tok.id_to_token(ids[i]).starts_with("\xe2\x96\x81")) continue;
    ++num_word_starts;
    EXPECT_EQ(logprob_token_text(tok, ids[i]).front(), ' ') << tok.id_to_token(ids[i]);
    EXPECT_NE(tok.decode(std::vector<TokenId>{ids[i]}, false).front(), ' ') << tok.id_to_token(ids[i]);
  }
  EXPECT_GE(num_word_starts, 3);
}

TEST(LogprobTextTest, ByteLevelTokensAreTheirBytes) {
  const auto tok = tokenizer::Tokenizer::load(tokenizer_dir("bytelevel-llama3"));
  const std::string text = "And God said, caf\xc3\xa9 \xf0\x9f\x99\x82";
  std::string joined;
  for (TokenId id : tok.encode(text, false)) joined += logprob_token_text(tok, id);
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace spindle::server
