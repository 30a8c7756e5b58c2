// Tokenizer behaviour beyond the golden strings: option variants, added-token flags,
// errors, long inputs and concurrent use.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "golden.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace spindle::tokenizer {
namespace {

using ::testing::HasSubstr;
using testing::golden_dir;
using testing::golden_tokenizer_dir;
using testing::read_json;

// A tiny character-level BPE: merges decide everything.
nlohmann::json tiny_tokenizer(const std::vector<std::string>& merges) {
  nlohmann::json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}, {"bc", 5}, {" ", 6}, {"<x>", 7}}},
                {"merges", merges}};
  j["added_tokens"] = nlohmann::json::array();
  j["decoder"] = {{"type", "Fuse"}};
  return j;
}

Tokenizer from_json(const nlohmann::json& j) { return Tokenizer::from_files({.tokenizer_json = j.dump()}); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "<no error>";
}

TEST(TokenizerTest, MergesApplyByRank) {
  EXPECT_EQ(from_json(tiny_tokenizer({"a b", "ab c"})).encode("abc"), (std::vector<TokenId>{4}));
  EXPECT_EQ(from_json(tiny_tokenizer({"b c", "a b", "ab c"})).encode("abc"), (std::vector<TokenId>{0, 5}));
  EXPECT_EQ(from_json(tiny_tokenizer({"a b"})).encode("ababa"), (std::vector<TokenId>{3, 3, 0}));
  // Characters missing from the vocabulary, without unk or byte fallback, are dropped before
  // merging (as HF), so their neighbours may merge.
  EXPECT_EQ(from_json(tiny_tokenizer({"a b"})).encode("azb"), (std::vector<TokenId>{3}));
  EXPECT_EQ(from_json(tiny_tokenizer({})).encode("azb"), (std::vector<TokenId>{0, 1}));
}

TEST(TokenizerTest, AddedTokenFlags) {
  auto j = tiny_tokenizer({"a b"});
  j["added_tokens"] = {{{"id", 7}, {"content", "<x>"}, {"special", true}, {"lstrip", true}, {"rstrip", false},
                        {"single_word", false}, {"normalized", false}}};
  EXPECT_EQ(from_json(j).encode("ab  <x> a"), (std::vector<TokenId>{3, 7, 6, 0}));
  EXPECT_EQ(from_json(j).encode("ab\u00a0\u3000<x>"), (std::vector<TokenId>{3, 7}));  // Unicode whitespace
  j["added_tokens"][0]["lstrip"] = false;
  j["added_tokens"][0]["rstrip"] = true;
  EXPECT_EQ(from_json(j).encode("ab <x>  a"), (std::vector<TokenId>{3, 6, 7, 0}));
  j["added_tokens"][0]["rstrip"] = false;
  j["added_tokens"][0]["single_word"] = true;
  EXPECT_EQ(from_json(j).encode("a<x> <x>").back(), 7);
  EXPECT_EQ(from_json(j).encode("a<x> <x>").front(), 0);
  EXPECT_EQ(from_json(j).encode("a<x> <x>").size(), 3u);  // a, (unmatched "<x>" dropped: no chars), " ", <x>
}

TEST(TokenizerTest, AddedTokensLongestMatchWins) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir("bytelevel-llama3"));
  const auto ids = tok.encode("<|start_header_id|>x<|end_header_id|>", false);
  EXPECT_EQ(ids.front(), *tok.token_to_id("<|start_header_id|>"));
  EXPECT_EQ(ids.back(), *tok.token_to_id("<|end_header_id|>"));
  EXPECT_TRUE(tok.is_special(ids.front()));
  EXPECT_EQ(tok.decode(ids, true), "x");
}

TEST(TokenizerTest, MetaspacePreTokenizerMatchesPrependReplace) {
  // Metaspace(prepend_scheme always, split false) is the Prepend + Replace normalizer pair,
  // except that Metaspace does not prepend to text that already starts with a space.
  auto j = read_json(golden_tokenizer_dir("metaspace") / "tokenizer.json");
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"},
                        {"split", false}};
  const Tokenizer tok = from_json(j);
  const auto golden = read_json(golden_tokenizer_dir("metaspace") / "golden.json");
  int compared = 0;
  for (const auto& s : golden.at("strings")) {
    const std::string text = s.at("text");
    if (text.starts_with(" ") || text.find("] ") != std::string::npos || text.find("> ") != std::string::npos) {
      continue;
    }
    ++compared;
    EXPECT_EQ(tok.encode(s.at("text").get<std::string>(), false), s.at("ids").get<std::vector<TokenId>>())
        << s.at("text");
  }
  EXPECT_GE(compared, 10);
  EXPECT_EQ(tok.encode("  two", false).front(), *tok.token_to_id("\u2581"));
  EXPECT_EQ(tok.encode(" two", false), tok.encode("two", false));  // both "▁two"
  // split=true cuts words at each ▁ and prepend_scheme=first prepends only at the start.
  j["pre_tokenizer"]["split"] = true;
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  const Tokenizer split = from_json(j);
  EXPECT_EQ(split.decode(split.encode("Hello big world", false)), "Hello big world");
  const auto after_bos = split.encode("<s>hi", false);  // "hi" is not at the text start: no ▁
  ASSERT_EQ(after_bos.size(), 3u);
  EXPECT_EQ(after_bos[0], 1);
  EXPECT_EQ(split.id_to_token(after_bos[1]), "h");
  EXPECT_EQ(split.id_to_token(split.encode("hi", false)[0]).rfind("\u2581", 0), 0u);
}

TEST(TokenizerTest, Gpt2ByteLevelPreTokenizerRoundTrips) {
  auto j = read_json(golden_tokenizer_dir("bytelevel-qwen2") / "tokenizer.json");
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const Tokenizer tok = from_json(j);
  const auto golden = read_json(golden_tokenizer_dir("bytelevel-qwen2") / "golden.json");
  for (const auto& s : golden.at("strings")) {
    const std::string text = s.at("text");
    EXPECT_EQ(tok.decode(tok.encode(text, false), false), text);
  }
}

// encode_continuation: text going on mid-way. The Metaspace golden tokenizer's normalizer prepends
// "\u2581" to every piece (HF's Prepend); a continuation must not get it, and appending the
// continuation of " world" to encode("hello") gives encode("hello world") (the tokenizer was
// trained with a Metaspace split, so no merge crosses a "\u2581"). Byte-level: no start-of-text
// behaviour, so a continuation is encode() without specials.
TEST(TokenizerTest, EncodeContinuationHasNoStartOfTextPrefix) {
  const Tokenizer meta = Tokenizer::load(golden_tokenizer_dir("metaspace"));
  const std::vector<TokenId> plain = meta.encode("{\"id\"", false, false);
  const std::vector<TokenId> cont = meta.encode_continuation("{\"id\"");
  ASSERT_FALSE(plain.empty());
  ASSERT_FALSE(cont.empty());
  EXPECT_TRUE(meta.id_to_token(plain.front()).starts_with("\u2581"));
  EXPECT_FALSE(meta.id_to_token(cont.front()).starts_with("\u2581")) << meta.id_to_token(cont.front());
  EXPECT_EQ(meta.decode(cont, false), "{\"id\"");
  for (const char* tail : {" world", " and more words", "s, then", "\u4e2d\u6587 \xf0\x9f\x98\x80"}) {
    std::vector<TokenId> joined = meta.encode("hello", false);
    const std::vector<TokenId> rest = meta.encode_continuation(tail);
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, meta.encode(std::string("hello") + tail, false)) << tail;
  }
  const Tokenizer bytes = Tokenizer::load(golden_tokenizer_dir("bytelevel-llama3"));
  for (const char* text : {"{\"id\": 1", " world", "<|eot_id|> as text"}) {
    EXPECT_EQ(bytes.encode_continuation(text), bytes.encode(text, false, false)) << text;
  }
  EXPECT_THROW(meta.encode_continuation("\xff"), Error);
}

// The pre-tokenizer's prefixes too: Metaspace "always" (what an older tokenizer.json with
// add_prefix_space and no prepend_scheme means) and ByteLevel's add_prefix_space put a prefix
// before every piece of encode(); a continuation's first piece gets none (its bytes decode back).
TEST(TokenizerTest, EncodeContinuationSkipsPreTokenizerPrefixes) {
  auto j = read_json(golden_tokenizer_dir("metaspace") / "tokenizer.json");
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}};
  const Tokenizer always = from_json(j);
  EXPECT_TRUE(always.id_to_token(always.encode("{x", false).front()).starts_with("\u2581"));
  const std::vector<TokenId> cont = always.encode_continuation("{x");
  ASSERT_FALSE(cont.empty());
  EXPECT_FALSE(always.id_to_token(cont.front()).starts_with("\u2581"));
  EXPECT_EQ(always.encode_continuation(" world"), always.encode("world", false));  // its own space
  auto b = read_json(golden_tokenizer_dir("bytelevel-qwen2") / "tokenizer.json");
  b["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  const Tokenizer spaced = from_json(b);
  EXPECT_EQ(spaced.decode(spaced.encode("hello", false), false), " hello");
  EXPECT_EQ(spaced.decode(spaced.encode_continuation("hello"), false), "hello");
  EXPECT_EQ(spaced.encode_continuation(" hello"), spaced.encode("hello", false));
}

TEST(TokenizerTest, LongSingleWordIsFast) {
  // SentencePiece-style text without a pre-tokenizer is one word: merging must not be quadratic.
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir("metaspace"));
  std::string text;
  while (text.size() < 400000) text += "The quick brown fox jumps over the lazy dog. 中文 ";
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TokenizerTest, ConcurrentEncodeIsConsistent) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir("bytelevel-llama3"));
  const std::string text = "def main():\n    print('hello') # 中文 😀\n";
  const auto expected = tok.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (tok.encode(text + std::to_string(i % 7)).size() < expected.size()) ++mismatches;
        if (tok.encode(text) != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerTest, InvalidUtf8IsAnError) {
  const Tokenizer tok = Tokenizer::load(golden_tokenizer_dir("bytelevel-llama3"));
  EXPECT_EQ(error_of([&] { tok.encode("hello \xC3\x28 world"); }), "prompt is not valid UTF-8 at byte 6");
}

TEST(TokenizerTest, UnsupportedModelTypeIsAnError) {
  auto j = tiny_tokenizer({});
  j["model"]["type"] = "Unigram";
  EXPECT_THAT(error_of([&] { from_json(j); }),
              HasSubstr("tokenizer.json: model type 'Unigram' is not supported (BPE only)"));
}

TEST(TokenizerTest, UnsupportedPartsAreNamed) {
  auto j = tiny_tokenizer({});
  j["normalizer"] = {{"type", "NFKD"}};
  EXPECT_THAT(error_of([&] { from_json(j); }), HasSubstr("normalizer 'NFKD' is not supported"));
  j = tiny_tokenizer({});
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_THAT(error_of([&] { from_json(j); }), HasSubstr("pre_tokenizer 'BertPreTokenizer' is not supported"));
  j = tiny_tokenizer({});
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_THAT(error_of([&] { from_json(j); }), HasSubstr("decoder 'WordPiece' is not supported"));
  j = tiny_tokenizer({"a q"});
  EXPECT_THAT(error_of([&] { from_json(j); }), HasSubstr("missing from the vocab"));
  EXPECT_THAT(error_of([&] { Tokenizer::from_files({.tokenizer_json = "{not json"}); }), HasSubstr("malformed"));
}

TEST(TokenizerTest, MissingTokenizerJsonNamesThePath) {
  const auto dir = std::filesystem::temp_directory_path() / "spindle_tokenizer_test_empty";
  std::filesystem::create_directories(dir);
  const std::string message = error_of([&] { Tokenizer::load(dir); });
  EXPECT_THAT(message, HasSubstr((dir / "tokenizer.json").string()));
  EXPECT_THAT(message, HasSubstr("not found"));
  std::filesystem::remove_all(dir);
}

TEST(TokenizerTest, VocabularyLookups) {
  const Tokenizer tok = Tokenizer::load(golden_dir() / "llama-gqa-f32");
  EXPECT_EQ(tok.vocab_size(), 1024);
  EXPECT_EQ(tok.id_to_token(*tok.token_to_id("<|eot_id|>")), "<|eot_id|>");
  EXPECT_EQ(tok.id_to_token(-1), "");
  EXPECT_EQ(tok.id_to_token(100000), "");
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
  EXPECT_EQ(tok.decode(std::vector<TokenId>{5000, -3}), "");  // unknown ids are skipped
}

}  // namespace
}  // namespace spindle::tokenizer

namespace spindle::tokenizer {
namespace {

// Found by fuzz_tokenizer_json: a vocabulary id that is a float or out of range was converted
// with undefined behaviour (or sized the id table by it); it is a bad file.
TEST(TokenizerTest, VocabularyIdsMustBeSaneIntegers) {
  for (const std::string id : {"8.888e31", "1.5", "\"3\"", "-1", "4294967296", "99999999"}) {
    const std::string text = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": )" + id + R"(}, "merges": []}})";
    try {
      (void)Tokenizer::from_files({.tokenizer_json = text});
      ADD_FAILURE() << id << " was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), ::testing::HasSubstr("token 'b'")) << id;
    }
  }
}

}  // namespace
}  // namespace spindle::tokenizer
