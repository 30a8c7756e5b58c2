// Tokenizer::from_gguf against llama.cpp: every text of the llama.cpp snapshot's
// models/ggml-vocab-<name>.gguf.inp (texts separated by a "__ggml_vocab_test__" line) must encode
// to exactly the ids in the matching line of .out (what llama.cpp's test-tokenizer-0 produced:
// add_special = false, parse_special = false), and those ids must decode back to the text.
// Files: tests/golden/gguf/ (SOURCE.md). Plus the metadata errors, stop ids, BOS and the
// SentencePiece merge order on small in-memory vocabularies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <deque>
#include <sstream>

#include "golden.h"
#include "support/gunzipped_file.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace spindle::tokenizer {
namespace {

struct VocabCase {
  std::string text;
  std::vector<TokenId> ids;
};

// The path tests/golden/gguf/ggml-vocab-<name>, no extension: the vocabulary is stored as
// <base>.gguf.gz (decompressed by gunzip_vocab), the texts and ids as <base>.gguf.inp / .out.
std::string vocab_base(const std::string& name) {
  return (testing::golden_dir() / "gguf" / ("ggml-vocab-" + name)).string();
}

// The vocabulary file decompressed to a temporary <...>.gguf that lives as long as the result.
spindle::testing::GunzippedFile gunzip_vocab(const std::string& name) {
  return spindle::testing::GunzippedFile(vocab_base(name) + ".gguf.gz");
}

// test-tokenizer-0.cpp's format: .inp texts joined by "\n__ggml_vocab_test__\n" (also after the
// last), .out one line of space-separated ids per text.
std::vector<VocabCase> read_cases(const std::string& name) {
  const std::string inp = read_text_file(vocab_base(name) + ".gguf.inp");
  const std::string out = read_text_file(vocab_base(name) + ".gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabCase> cases;
  std::istringstream lines(out);
  std::string line;
  for (const std::string& text : texts) {
    EXPECT_TRUE(static_cast<bool>(std::getline(lines, line))) << name << ": .out has fewer lines than .inp texts";
    VocabCase c{text, {}};
    std::istringstream ids(line);
    for (long id = 0; ids >> id;) c.ids.push_back(static_cast<TokenId>(id));
    cases.push_back(std::move(c));
  }
  return cases;
}

// Encodes and decodes every case; returns how many cases matched llama.cpp's ids.
void check_vocab(const std::string& name, size_t expected_cases) {
  const spindle::testing::GunzippedFile vocab = gunzip_vocab(name);
  const gguf::GgufFile file(vocab.path());
  const Tokenizer tokenizer = Tokenizer::from_gguf(file.metadata());
  const std::vector<VocabCase> cases = read_cases(name);
  ASSERT_EQ(cases.size(), expected_cases) << name;
  size_t encoded = 0;
  size_t decoded = 0;
  for (const VocabCase& c : cases) {
    const std::vector<TokenId> ids = tokenizer.encode(c.text, /*add_special_tokens=*/false,
                                                      /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << name << ": text '" << c.text << "'";
    encoded += ids == c.ids;
    const std::string text = tokenizer.decode(c.ids, /*skip_special_tokens=*/false);
    EXPECT_EQ(text, c.text) << name << ": decoding llama.cpp's ids [" << fmt::format("{}", fmt::join(c.ids, " "))
                            << "]";
    decoded += text == c.text;
  }
  std::cout << name << ": " << encoded << "/" << cases.size() << " texts encode to llama.cpp's ids, " << decoded
            << "/" << cases.size() << " decode back\n";
}

TEST(GgufTokenizerGpt2, MatchesLlamaCpp) { check_vocab("gpt-2", 46); }
TEST(GgufTokenizerLlamaSpm, MatchesLlamaCpp) { check_vocab("llama-spm", 46); }
TEST(GgufTokenizerPhi3, MatchesLlamaCpp) { check_vocab("phi-3", 46); }
TEST(GgufTokenizerDeepseekLlm, MatchesLlamaCpp) { check_vocab("deepseek-llm", 46); }
TEST(GgufTokenizerDeepseekCoder, MatchesLlamaCpp) { check_vocab("deepseek-coder", 46); }
TEST(GgufTokenizerFalcon, MatchesLlamaCpp) { check_vocab("falcon", 46); }
TEST(GgufTokenizerMpt, MatchesLlamaCpp) { check_vocab("mpt", 46); }
TEST(GgufTokenizerStarcoder, MatchesLlamaCpp) { check_vocab("starcoder", 46); }

// SPM (llama-spm, add_space_prefix): encode() puts a dummy-prefix space before the text;
// encode_continuation() does not, so "Hello" continuing a text is not " Hello".
TEST(GgufTokenizerSpm, EncodeContinuationHasNoDummyPrefix) {
  const spindle::testing::GunzippedFile vocab = gunzip_vocab("llama-spm");
  const gguf::GgufFile file(vocab.path());
  const Tokenizer t = Tokenizer::from_gguf(file.metadata());
  const std::vector<TokenId> plain = t.encode("Hello", false);
  const std::vector<TokenId> cont = t.encode_continuation("Hello");
  ASSERT_FALSE(cont.empty());
  EXPECT_TRUE(t.id_to_token(plain.front()).starts_with("\u2581"));
  EXPECT_FALSE(t.id_to_token(cont.front()).starts_with("\u2581")) << t.id_to_token(cont.front());
  EXPECT_EQ(t.encode_continuation(" Hello"), plain);  // the space is the text's own
}

TEST(GgufTokenizerSpecial, BosAndStopsFromMetadata) {
  {
    const spindle::testing::GunzippedFile vocab = gunzip_vocab("llama-spm");
    const gguf::GgufFile file(vocab.path());
    const Tokenizer t = Tokenizer::from_gguf(file.metadata());
    // add_bos_token = true, bos_token_id = 1, eos_token_id = 2.
    EXPECT_TRUE(t.adds_bos());
    EXPECT_FALSE(t.adds_eos());
    EXPECT_EQ(t.bos_id(), 1);
    EXPECT_THAT(t.eos_ids(), ::testing::ElementsAre(2));
    const std::vector<TokenId> ids = t.encode("Hello", true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 1);
    // Control tokens in the text are matched only when parse_special.
    EXPECT_THAT(t.encode("</s>", false, true), ::testing::ElementsAre(2));
    EXPECT_THAT(t.encode("</s>", false, false), ::testing::Not(::testing::Contains(2)));
    EXPECT_EQ(t.decode(std::vector<TokenId>{1, 15043, 2}, /*skip_special_tokens=*/true), "Hello");
    EXPECT_EQ(t.chat_template(), "");  // the file has no tokenizer.chat_template
  }
  {
    const spindle::testing::GunzippedFile vocab = gunzip_vocab("phi-3");
    const gguf::GgufFile file(vocab.path());
    const Tokenizer t = Tokenizer::from_gguf(file);
    // tokenizer.chat_template (read_gguf.py shows it begins so) and eos_token_id 32000 <|endoftext|>.
    EXPECT_THAT(t.chat_template(), ::testing::StartsWith("{{ bos_token }}{% for message in messages %}"));
    EXPECT_EQ(t.eos_token(), "<|endoftext|>");
    EXPECT_THAT(t.eos_ids(), ::testing::Contains(32000));
    // <|end|> (Phi-3's end of turn) is one of llama.cpp's end-of-generation texts.
    EXPECT_THAT(t.eos_ids(), ::testing::Contains(t.token_to_id("<|end|>").value_or(-1)));
  }
  {
    const spindle::testing::GunzippedFile vocab = gunzip_vocab("gpt-2");
    const Tokenizer t = Tokenizer::load(vocab.path());  // a .gguf path, not a folder
    EXPECT_FALSE(t.adds_bos());  // no add_bos_token key; gpt-2's pre-tokenizer adds none
    EXPECT_EQ(t.bos_id(), 50256);
    // eos_token_id 50256 is <|endoftext|>, also one of llama.cpp's end-of-generation texts.
    EXPECT_THAT(t.eos_ids(), ::testing::ElementsAre(50256));
    EXPECT_EQ(t.encode("Hello world", true), t.encode("Hello world", false));
  }
}

// An in-memory vocabulary: the Metadata refers into `strings` / `numbers`, kept alive here.
class FakeVocab {
 public:
  explicit FakeVocab(std::string model) { set_string("tokenizer.ggml.model", std::move(model)); }

  void set_string(std::string key, std::string value) {
    entries_.push_back({std::move(key), {std::move(value)}, {}, {}, true});
  }
  void set_strings(std::string key, std::vector<std::string> values) {
    entries_.push_back({std::move(key), std::move(values), {}, {}, false});
  }
  void set_u32(std::string key, uint32_t value) {
    Entry e{std::move(key), {}, {}, gguf::ValueType::kU32, false};
    e.bytes.resize(4);
    std::memcpy(e.bytes.data(), &value, 4);
    e.count = 1;
    entries_.push_back(std::move(e));
  }
  void set_ints(std::string key, const std::vector<int32_t>& values) {
    Entry e{std::move(key), {}, {}, gguf::ValueType::kI32, false};
    e.bytes.resize(values.size() * 4);
    std::memcpy(e.bytes.data(), values.data(), e.bytes.size());
    e.count = values.size();
    e.array = true;
    entries_.push_back(std::move(e));
  }
  void set_floats(std::string key, const std::vector<float>& values) {
    Entry e{std::move(key), {}, {}, gguf::ValueType::kF32, false};
    e.bytes.resize(values.size() * 4);
    std::memcpy(e.bytes.data(), values.data(), e.bytes.size());
    e.count = values.size();
    e.array = true;
    entries_.push_back(std::move(e));
  }

  gguf::Metadata metadata() const {
    gguf::Metadata m("fake.gguf");
    for (const Entry& e : entries_) {
      if (e.numeric) {
        const auto bytes = std::as_bytes(std::span(e.bytes));
        m.add(e.key, gguf::Value(e.array ? gguf::ValueType::kArray : *e.numeric, *e.numeric, e.count, bytes));
      } else {
        std::vector<std::string_view> views(e.strings.begin(), e.strings.end());
        m.add(e.key, gguf::Value(e.scalar ? gguf::ValueType::kString : gguf::ValueType::kArray, std::move(views)));
      }
    }
    return m;
  }

 private:
  struct Entry {
    std::string key;
    std::vector<std::string> strings;
    std::vector<uint8_t> bytes;
    std::optional<gguf::ValueType> numeric;
    bool scalar = false;
    uint64_t count = 0;
    bool array = false;
  };
  std::deque<Entry> entries_;
};

std::string error_of(const FakeVocab& vocab) {
  try {
    (void)Tokenizer::from_gguf(vocab.metadata());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

FakeVocab small_bpe() {
  FakeVocab v("gpt2");
  v.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<eos>", "<eot>", "<eom>"});
  v.set_strings("tokenizer.ggml.merges", {"a b"});
  return v;
}

TEST(GgufTokenizerErrors, PreTokenizerMissingOrUnknownNamesTheKey) {
  FakeVocab missing = small_bpe();
  EXPECT_THAT(error_of(missing), ::testing::HasSubstr("'tokenizer.ggml.pre' is missing"));
  EXPECT_THAT(error_of(missing), ::testing::HasSubstr("fake.gguf"));
  FakeVocab unknown = small_bpe();
  unknown.set_string("tokenizer.ggml.pre", "no-such-pre");
  EXPECT_THAT(error_of(unknown), ::testing::HasSubstr("'tokenizer.ggml.pre' = 'no-such-pre' is not supported"));
  for (const char* name : {"default", "llama-bpe", "llama3", "qwen2", "qwen35", "deepseek-llm", "deepseek-v3",
                           "gpt-2", "smollm", "tekken"}) {
    FakeVocab ok = small_bpe();
    ok.set_string("tokenizer.ggml.pre", name);
    ok.set_u32("tokenizer.ggml.bos_token_id", 3);  // llama-bpe / llama3 / tekken add BOS
    EXPECT_EQ(error_of(ok), "") << name;
  }
}

TEST(GgufTokenizerErrors, ModelAndIds) {
  FakeVocab model("bert");
  model.set_strings("tokenizer.ggml.tokens", {"a"});
  EXPECT_THAT(error_of(model), ::testing::HasSubstr("'tokenizer.ggml.model' = 'bert' is not supported"));
  FakeVocab range = small_bpe();
  range.set_string("tokenizer.ggml.pre", "gpt-2");
  range.set_u32("tokenizer.ggml.eot_token_id", 6);
  EXPECT_THAT(error_of(range), ::testing::HasSubstr("'tokenizer.ggml.eot_token_id' = 6 is outside the vocabulary"));
  FakeVocab bad_utf8("llama");
  bad_utf8.set_strings("tokenizer.ggml.tokens", {"a", "\xff"});
  EXPECT_THAT(error_of(bad_utf8), ::testing::HasSubstr("fake.gguf: tokenizer.ggml.tokens[1]"));
  FakeVocab no_bytes("llama");  // SentencePiece without <0xNN> tokens cannot fall back to bytes
  no_bytes.set_strings("tokenizer.ggml.tokens", {"a", "b"});
  EXPECT_THAT(error_of(no_bytes), ::testing::HasSubstr("no byte token <0x00>"));
  FakeVocab no_merges("gpt2");
  no_merges.set_string("tokenizer.ggml.pre", "gpt-2");
  no_merges.set_strings("tokenizer.ggml.tokens", {"a"});
  EXPECT_THAT(error_of(no_merges), ::testing::HasSubstr("'tokenizer.ggml.merges' is missing"));
}

TEST(GgufTokenizerSpecial, StopIdsFromEosEotEom) {
  FakeVocab v = small_bpe();
  v.set_string("tokenizer.ggml.pre", "gpt-2");
  v.set_u32("tokenizer.ggml.eos_token_id", 3);
  v.set_u32("tokenizer.ggml.eot_token_id", 4);
  v.set_u32("tokenizer.ggml.eom_token_id", 5);
  const Tokenizer t = Tokenizer::from_gguf(v.metadata());
  EXPECT_THAT(t.eos_ids(), ::testing::ElementsAre(3, 4, 5));
  EXPECT_EQ(t.eot_id(), 4);
  EXPECT_EQ(t.eom_id(), 5);
  EXPECT_EQ(t.eos_token(), "<eos>");
  EXPECT_THAT(t.encode("ab", false), ::testing::ElementsAre(2));
}

// SentencePiece merges by score, not left to right: with "bc" scoring above "ab", "abc" is
// a + bc; with "ab" above, ab + c. A character missing from the vocabulary becomes byte tokens,
// and add_space_prefix puts U+2581 before the text.
TEST(GgufTokenizerSpm, MergesByScoreAndFallsBackToBytes) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(fmt::format("<0x{:02X}>", b));
  const auto base = static_cast<TokenId>(tokens.size());
  for (const char* t : {"a", "b", "c", "ab", "bc", "\u2581", "\u2581a"}) tokens.emplace_back(t);
  // llama.cpp token types: 2 unknown, 3 control, 6 byte, 1 normal.
  std::vector<int32_t> types = {2, 3, 3};
  types.resize(tokens.size(), 1);
  std::fill(types.begin() + 3, types.begin() + 259, 6);
  auto make = [&](float ab, float bc) {
    FakeVocab v("llama");
    v.set_strings("tokenizer.ggml.tokens", tokens);
    std::vector<float> scores(tokens.size(), 0.0f);
    scores[static_cast<size_t>(base + 3)] = ab;
    scores[static_cast<size_t>(base + 4)] = bc;
    scores[static_cast<size_t>(base + 6)] = -5.0f;
    v.set_floats("tokenizer.ggml.scores", scores);
    v.set_ints("tokenizer.ggml.token_type", types);
    return v;
  };
  // "▁abc": candidates ▁a (-5), ab, bc. bc first leaves ▁ a bc, then ▁a merges: ▁a + bc.
  const Tokenizer bc_first = Tokenizer::from_gguf(make(-2.0f, -1.0f).metadata());
  EXPECT_THAT(bc_first.encode("abc", false), ::testing::ElementsAre(base + 6, base + 4));
  const Tokenizer ab_first = Tokenizer::from_gguf(make(-1.0f, -2.0f).metadata());
  // "▁a" (-5) loses to "ab" (-1): ▁ + ab + c.
  EXPECT_THAT(ab_first.encode("abc", false), ::testing::ElementsAre(base + 5, base + 3, base + 2));
  // 'é' (C3 A9) is not a token: its two byte tokens <0xC3> <0xA9>.
  EXPECT_THAT(ab_first.encode("é", false), ::testing::ElementsAre(base + 5, 3 + 0xC3, 3 + 0xA9));
  const std::vector<TokenId> with_bos = ab_first.encode("é abc", true);  // default add_bos: <s> = 1
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 1);
  EXPECT_EQ(ab_first.decode(with_bos), "é abc");
  EXPECT_EQ(ab_first.decode(with_bos, /*skip_special_tokens=*/false), "<s> é abc");
}

}  // namespace
}  // namespace spindle::tokenizer

namespace spindle::tokenizer {
namespace {

// The snapshot has no llama-bpe or qwen2 vocabulary file, so those two table rows are checked
// against Hugging Face instead: the small trained tokenizers in tests/golden/tokenizers (ids
// pinned by HF tokenizers, see tokenizer_golden_test) converted to GGUF metadata the way
// convert_hf_to_gguf.py does — tokens by id, merges as "a b", special added tokens as control
// (type 3), the rest normal — and encoded with parse_special (HF matches added tokens in text).
void check_against_hf(const std::string& fixture, const std::string& pre) {
  const auto json = testing::read_json(testing::golden_tokenizer_dir(fixture) / "tokenizer.json");
  const auto& vocab = json.at("model").at("vocab");
  std::vector<std::string> tokens(vocab.size());
  for (const auto& [token, id] : vocab.items()) tokens.at(id.get<size_t>()) = token;
  std::vector<int32_t> types(tokens.size(), 1);
  for (const auto& added : json.at("added_tokens")) {
    if (added.at("special").get<bool>()) types.at(added.at("id").get<size_t>()) = 3;
  }
  std::vector<std::string> merges;
  for (const auto& m : json.at("model").at("merges")) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  FakeVocab v("gpt2");
  v.set_string("tokenizer.ggml.pre", pre);
  v.set_strings("tokenizer.ggml.tokens", tokens);
  v.set_strings("tokenizer.ggml.merges", merges);
  v.set_ints("tokenizer.ggml.token_type", types);
  v.set_u32("tokenizer.ggml.bos_token_id", 0);
  const Tokenizer t = Tokenizer::from_gguf(v.metadata());
  const auto golden = testing::read_json(testing::golden_tokenizer_dir(fixture) / "golden.json");
  size_t matched = 0;
  for (const auto& s : golden.at("strings")) {
    const std::string text = s.at("text");
    const auto expected = s.at("ids").get<std::vector<TokenId>>();
    const std::vector<TokenId> ids = t.encode(text, false, /*parse_special=*/true);
    EXPECT_EQ(ids, expected) << fixture << " as GGUF pre '" << pre << "': text '" << text << "'";
    matched += ids == expected;
    EXPECT_EQ(t.decode(expected, false), s.at("decoded").get<std::string>()) << fixture << ": " << text;
  }
  std::cout << fixture << " as tokenizer.ggml.pre = " << pre << ": " << matched << "/" << golden.at("strings").size()
            << " texts give HF's ids\n";
}

TEST(GgufTokenizerLlamaBpe, MatchesHuggingFaceOnAConvertedVocabulary) { check_against_hf("bytelevel-llama3", "llama-bpe"); }
TEST(GgufTokenizerQwen2, MatchesHuggingFaceOnAConvertedVocabulary) { check_against_hf("bytelevel-qwen2", "qwen2"); }

}  // namespace
}  // namespace spindle::tokenizer

namespace spindle::tokenizer {
namespace {

// Random texts over letters, digits, punctuation, whitespace runs, accents, CJK and emoji (no
// U+2581, which SentencePiece reads as a space, and no '<' / '[', which start special and
// user-defined tokens that may swallow whitespace): decode(encode(text)) must give text back.
TEST(GgufTokenizerRoundTrip, RandomTextsDecodeBack) {
  const std::vector<std::string> pieces = {"a", "Z", "q", "7", "42", " ", "  ", "\t", "\n", "\r\n", ".", ",", "'s",
                                           "'ll", "!", "?", "-", "é", "ß", "Ω", "中", "文", "日本", "한", "😀", "👍🏽",
                                           "\u0301", "\u00a0", "\u3000", "$", "(", ")", "{", "_", "ℕ"};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (const char* name : {"gpt-2", "llama-spm", "phi-3", "deepseek-llm", "deepseek-coder", "falcon", "mpt",
                           "starcoder"}) {
    const spindle::testing::GunzippedFile vocab = gunzip_vocab(name);
    const Tokenizer t = Tokenizer::load(vocab.path());
    int failures = 0;
    for (int i = 0; i < 200 && failures < 5; ++i) {
      std::string text;
      const size_t n = next() % 40;
      for (size_t k = 0; k < n; ++k) text += pieces[next() % pieces.size()];
      const std::string decoded = t.decode(t.encode(text, false, false), false);
      EXPECT_EQ(decoded, text) << name;
      failures += decoded != text;
    }
  }
}

}  // namespace
}  // namespace spindle::tokenizer
