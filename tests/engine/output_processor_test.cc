// The output processor with no model: a tiny in-memory tokenizer (byte fallback, so a character
// can span tokens), tokens fed by hand, events read from the stream. Every expected text below is
// derived by hand from the tokens' bytes and the definitions in stop_policy.h and
// output_processor.h (what is held back, where the text is cut, what a finish flushes).
#include "engine/output_processor.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "kv/page_allocator.h"

namespace spindle::engine {
namespace {

// Token ids of the tiny vocabulary.
enum : TokenId {
  kE2 = 0, kX82 = 1, kXAC = 2,  // the bytes of U+20AC (EURO SIGN): E2 82 AC
  kA = 3, kB = 4, kCapE = 5, kCapN = 6, kCapD = 7, kSpace = 8,
  kEos = 9,       // tokenizer_config.json's eos_token "<eos>"
  kEot = 10,      // generation_config.json's eos_token_id
  kX = 11,        // the model config's eos id (an ordinary token's id)
  kEnd = 12,      // a request's stop_token_ids
  kBar = 13,      // "|"
};
const std::string kEuro = "\xE2\x82\xAC";
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD: an incomplete sequence settled at the end

tokenizer::Tokenizer tiny_tokenizer() {
  nlohmann::json j;
  j["model"] = {{"type", "BPE"},
                {"byte_fallback", true},
                {"vocab",
                 {{"<0xE2>", 0}, {"<0x82>", 1}, {"<0xAC>", 2}, {"a", 3}, {"b", 4}, {"E", 5}, {"N", 6}, {"D", 7},
                  {" ", 8}, {"x", 11}, {"|", 13}}},
                {"merges", nlohmann::json::array()}};
  j["added_tokens"] = {{{"id", 9}, {"content", "<eos>"}, {"special", true}},
                       {{"id", 10}, {"content", "<eot>"}, {"special", true}},
                       {{"id", 12}, {"content", "<end>"}, {"special", true}}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  return tokenizer::Tokenizer::from_files({.tokenizer_json = j.dump(),
                                           .tokenizer_config_json = R"({"eos_token": "<eos>"})",
                                           .generation_config_json = R"({"eos_token_id": [10]})"});
}

struct Events {
  std::vector<RequestOutput> all;
  std::string text() const {
    std::string t;
    for (const auto& e : all) t += e.text;
    return t;
  }
  const RequestOutput& last() const { return all.back(); }
};

class OutputProcessorTest : public ::testing::Test {
 protected:
  static constexpr int kMaxModelLen = 64;
  OutputProcessorTest()
      : tokenizer_(tiny_tokenizer()), allocator_(16, 16), output_(tokenizer_, {kX}, kMaxModelLen, metrics_) {}

  // A request with a 3-token prompt; its state is made by the processor (its default policies).
  Request& add(SamplingParams params, int prompt_length = 3) {
    stream_ = std::make_shared<RequestStream>();
    request_ = std::make_unique<Request>(1, std::vector<TokenId>(static_cast<size_t>(prompt_length), kA), allocator_);
    output_.add(1, output_.make_state(std::move(params), /*seed=*/7, stream_));
    return *request_;
  }
  // Feeds tokens until one finishes the request; the events pushed meanwhile.
  Events feed(const std::vector<TokenId>& tokens) {
    for (TokenId t : tokens) {
      if (request_->finished) break;
      SampledToken s;
      s.token = t;
      s.logprob = -0.25f * static_cast<float>(t);
      output_.accept_token(*request_, output_.at(1), s);
    }
    return drain();
  }
  Events drain() {
    Events e;
    RequestOutput out;
    while (stream_->try_pop(out)) e.all.push_back(std::move(out));
    return e;
  }
  static SamplingParams params(int max_tokens = 16) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    return p;
  }

  tokenizer::Tokenizer tokenizer_;
  Metrics metrics_;
  kv::PageAllocator allocator_;
  OutputProcessor output_;
  std::shared_ptr<RequestStream> stream_;
  std::unique_ptr<Request> request_;
};

TEST_F(OutputProcessorTest, StopStringAcrossTokenBoundaries) {
  SamplingParams p = params();
  p.stop = {"END"};
  add(p);
  const Events e = feed({kA, kCapE, kCapN, kB, kCapE, kCapN, kCapD, kA});
  // a: "a" out. E, N: "E", "EN" may start "END": held. b: "ENb" cannot: out. E, N: held. D: "END"
  // matches, nothing before it is pending: "" and the end (the last a is never accepted).
  ASSERT_EQ(e.all.size(), 7u);
  const std::vector<std::string> texts = {"a", "", "", "ENb", "", "", ""};
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(e.all[i].text, texts[i]) << "event " << i;
  EXPECT_TRUE(e.last().finished);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(e.last().tokens, std::vector<TokenId>{kCapD});
  EXPECT_EQ(e.last().num_output_tokens, 7);
  EXPECT_TRUE(request_->finished);
  EXPECT_EQ(request_->output.size(), 7u);
}

TEST_F(OutputProcessorTest, LengthFlushesTheHeldStartOfAStopString) {
  SamplingParams p = params(/*max_tokens=*/3);
  p.stop = {"END"};
  add(p);
  const Events e = feed({kA, kCapE, kCapN});
  // "a" out, "E" and "EN" held; the third token reaches max_tokens: "EN" is flushed.
  ASSERT_EQ(e.all.size(), 3u);
  EXPECT_EQ(e.text(), "aEN");
  EXPECT_EQ(e.last().text, "EN");
  EXPECT_EQ(e.last().finish_reason, FinishReason::kLength);
}

TEST_F(OutputProcessorTest, ModelLengthEndsTheRequest) {
  add(params(), /*prompt_length=*/kMaxModelLen - 2);
  const Events e = feed({kA, kB, kA});
  // prompt 62 + 2 output tokens = 64 = max_model_len: ends at the second token.
  ASSERT_EQ(e.all.size(), 2u);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kLength);
  EXPECT_EQ(e.text(), "ab");
}

TEST_F(OutputProcessorTest, Utf8IsHeldBackUntilTheCharacterCompletes) {
  add(params());
  const Events e = feed({kA, kE2, kX82, kXAC, kB});
  ASSERT_EQ(e.all.size(), 5u);
  const std::vector<std::string> texts = {"a", "", "", kEuro, "b"};
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(e.all[i].text, texts[i]) << "event " << i;
}

TEST_F(OutputProcessorTest, AnIncompleteCharacterAtTheEndIsSettled) {
  add(params(/*max_tokens=*/2));
  const Events e = feed({kA, kE2});
  // E2 alone starts a 3-byte sequence: held, then settled as U+FFFD when max_tokens ends it.
  ASSERT_EQ(e.all.size(), 2u);
  EXPECT_EQ(e.all[1].text, kReplacement);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kLength);
}

TEST_F(OutputProcessorTest, StopStringsMatchWholeCharacters) {
  SamplingParams p = params();
  p.stop = {kEuro};
  add(p);
  const Events e = feed({kA, kE2, kX82, kXAC, kB});
  ASSERT_EQ(e.all.size(), 4u);
  EXPECT_EQ(e.text(), "a");
  EXPECT_EQ(e.last().finish_reason, FinishReason::kStop);
}

TEST_F(OutputProcessorTest, EndOfSequenceFromEverySource) {
  // tokenizer_config.json's eos_token, generation_config.json's eos_token_id, the model config's
  // eos id, the request's stop_token_ids: each ends the request before its text.
  for (TokenId eos : {kEos, kEot, kX, kEnd}) {
    SamplingParams p = params();
    p.stop_token_ids = {kEnd};
    add(p);
    const Events e = feed({kA, eos, kB});
    ASSERT_EQ(e.all.size(), 2u) << "eos " << eos;
    EXPECT_EQ(e.text(), "a") << "eos " << eos;
    EXPECT_EQ(e.last().finish_reason, FinishReason::kStop) << "eos " << eos;
    EXPECT_EQ(e.last().tokens, std::vector<TokenId>{eos});
    output_.erase(1);
  }
}

TEST_F(OutputProcessorTest, IgnoreEosKeepsOnlyTheRequestsOwnStopTokens) {
  SamplingParams p = params();
  p.ignore_eos = true;
  p.stop_token_ids = {kEnd};
  add(p);
  // <eos> and <eot> are special (skipped: no text), x is text: none ends it; <end> does.
  const Events e = feed({kEos, kEot, kX, kEnd, kA});
  ASSERT_EQ(e.all.size(), 4u);
  EXPECT_EQ(e.text(), "x");
  EXPECT_EQ(e.last().finish_reason, FinishReason::kStop);
}

TEST_F(OutputProcessorTest, EndOfSequenceFlushesHeldText) {
  SamplingParams p = params();
  p.stop = {"END"};
  add(p);
  const Events e = feed({kCapE, kE2, kEos});
  // "E" held (may start "END"); E2 held by the detokenizer (incomplete); <eos>: the detokenizer
  // settles E2 as U+FFFD, "E" + U+FFFD cannot start "END": both out.
  ASSERT_EQ(e.all.size(), 3u);
  EXPECT_EQ(e.last().text, "E" + kReplacement);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kStop);
}

// A constraint that has completed: a fake grammar "a b" that ends the request after the token
// that completes it, its text included (as a grammar with no continuation left would).
class CompletedGrammar final : public StopPolicy {
 public:
  StopVerdict check_token(const Request& request, TokenId token) override {
    const size_t n = request.output.size();
    if (token == kB && n >= 2 && request.output[n - 2] == kA) return {StopPoint::kAfterText, FinishReason::kStop};
    return {};
  }
};

TEST_F(OutputProcessorTest, AConstraintEndsTheRequestAfterItsText) {
  SamplingParams p = params();
  p.stop = {"bE"};
  add(p);
  output_.at(1).stop_policies.push_back(std::make_unique<CompletedGrammar>());
  const Events e = feed({kB, kA, kA, kB, kA});
  // b: may start "bE": held. a: "ba" out. a: "a" out. b: held, then the grammar completes: the
  // held "b" is flushed into the final event, finish reason stop.
  ASSERT_EQ(e.all.size(), 4u);
  const std::vector<std::string> texts = {"", "ba", "a", "b"};
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(e.all[i].text, texts[i]) << "event " << i;
  EXPECT_TRUE(e.last().finished);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kStop);
  EXPECT_EQ(metrics_.snapshot().requests_finished_total, 1u);
}

TEST_F(OutputProcessorTest, AStopTokenWinsOverAConstraintAtTheSameToken) {
  add(params());
  // A constraint that completes at every token; the model eos id x ends before its text.
  class AlwaysComplete final : public StopPolicy {
    StopVerdict check_token(const Request&, TokenId) override { return {StopPoint::kAfterText, FinishReason::kLength}; }
  };
  output_.at(1).stop_policies.insert(output_.at(1).stop_policies.begin(), std::make_unique<AlwaysComplete>());
  const Events e = feed({kX});
  ASSERT_EQ(e.all.size(), 1u);
  EXPECT_EQ(e.last().text, "");
  EXPECT_EQ(e.last().finish_reason, FinishReason::kStop);
}

// A reasoning parser's shape: text up to the first "|" is reasoning, the rest is content.
class ReasoningSplitter final : public StreamTransformer {
 public:
  void transform(RequestOutput& out) override {
    if (!reasoning_) return;
    const size_t bar = out.text.find('|');
    if (bar == std::string::npos) {
      out.reasoning_text += out.text;
      out.text.clear();
      return;
    }
    out.reasoning_text += out.text.substr(0, bar);
    out.text.erase(0, bar + 1);
    reasoning_ = false;
  }

 private:
  bool reasoning_ = true;
};

// Upper-cases ASCII content: runs after the splitter, so it sees only what the splitter left.
class Shout final : public StreamTransformer {
 public:
  void transform(RequestOutput& out) override {
    for (char& c : out.text) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
  }
};

TEST_F(OutputProcessorTest, StreamTransformersMoveTextBetweenFieldsInOrder) {
  add(params(/*max_tokens=*/5));
  output_.at(1).transformers.push_back(std::make_unique<ReasoningSplitter>());
  output_.at(1).transformers.push_back(std::make_unique<Shout>());
  const Events e = feed({kA, kB, kBar, kA, kB});
  ASSERT_EQ(e.all.size(), 5u);
  const std::vector<std::string> reasoning = {"a", "b", "", "", ""};
  const std::vector<std::string> content = {"", "", "", "A", "B"};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(e.all[i].reasoning_text, reasoning[i]) << "event " << i;
    EXPECT_EQ(e.all[i].text, content[i]) << "event " << i;
    EXPECT_EQ(e.all[i].tokens.size(), 1u) << "tokens are never moved";
  }
  EXPECT_EQ(e.last().finish_reason, FinishReason::kLength);
}

TEST_F(OutputProcessorTest, LogprobsOnlyWhenAskedFor) {
  add(params(2));
  Events e = feed({kA, kB});
  EXPECT_TRUE(e.all[0].logprobs.empty());
  output_.erase(1);
  SamplingParams p = params(2);
  p.logprobs = true;
  add(p);
  e = feed({kA, kB});
  ASSERT_EQ(e.all[1].logprobs.size(), 1u);
  EXPECT_EQ(e.all[1].logprobs[0].token, kB);
  EXPECT_FLOAT_EQ(e.all[1].logprobs[0].logprob, -0.25f * kB);
}

TEST_F(OutputProcessorTest, NonFiniteLogitsEndWithAnError) {
  add(params());
  feed({kA});
  SampledToken bad;
  bad.non_finite = true;
  output_.accept_token(*request_, output_.at(1), bad);
  const Events e = drain();
  ASSERT_EQ(e.all.size(), 1u);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kError);
  EXPECT_TRUE(request_->failed);
  EXPECT_EQ(request_->output.size(), 1u) << "no token appended";
  EXPECT_EQ(output_.num_accepted_tokens(), 1u);
}

TEST_F(OutputProcessorTest, VerifiedTokensStopAtTheFirstThatEnds) {
  add(params());
  std::vector<SampledToken> tokens(3);
  tokens[0].token = kA;
  tokens[1].token = kEos;
  tokens[2].token = kB;
  // Two accepted drafts (a, <eos>) and the bonus token b: <eos> ends the request, b is dropped.
  output_.accept_verified(*request_, output_.at(1), tokens, /*num_accepted_drafts=*/2);
  const Events e = drain();
  ASSERT_EQ(e.all.size(), 2u);
  EXPECT_EQ(e.all[0].num_accepted_draft_tokens, 1);
  EXPECT_EQ(e.all[1].num_accepted_draft_tokens, 2);
  EXPECT_EQ(request_->output, (std::vector<TokenId>{kA, kEos}));
}

TEST_F(OutputProcessorTest, EngineEndsAbortAndOverCapacity) {
  add(params());
  feed({kCapE});  // "E" held by no policy: out at once
  output_.finish_aborted(*request_);
  Events e = drain();
  ASSERT_EQ(e.all.size(), 1u);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(request_->finished);
  output_.erase(1);
  SamplingParams p = params();
  p.stop = {"EN"};
  add(p);
  feed({kA, kCapE});
  drain();
  output_.finish_over_capacity(*request_, /*capacity_tokens=*/5);
  e = drain();
  ASSERT_EQ(e.all.size(), 1u);
  EXPECT_EQ(e.last().finish_reason, FinishReason::kLength);
  EXPECT_EQ(e.last().text, "E") << "the held start of the stop string is flushed";
}

}  // namespace
}  // namespace spindle::engine
