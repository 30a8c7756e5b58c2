// The speculator with no model: requests built by hand, a fake proposer, verifies recorded by
// hand. Expected values are derived in the comments from the definitions in speculator.h
// (decayed counts, the prior) and cost_model.h (plain decoding measured first, kMinSamples times
// per way, then the way with the most expected tokens per second).
#include "engine/speculative/speculator.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "kv/page_allocator.h"

namespace spindle::engine::speculative {
namespace {

constexpr int kMaxModelLen = 64;

// Proposes the same tokens for every request (as many as it may), match_length as set.
class FixedProposer final : public Proposer {
 public:
  explicit FixedProposer(std::vector<TokenId> tokens, int match_length = 0)
      : tokens_(std::move(tokens)), match_length_(match_length) {}
  const char* name() const override { return "fixed"; }
  bool cheap() const override { return true; }
  void propose(std::span<const ProposalRequest> requests) override {
    asked.assign(requests.begin(), requests.end());
    for (const ProposalRequest& q : requests) {
      q.out->tokens = tokens_;
      q.out->match_length = match_length_;
    }
  }
  void forget(uint64_t id) override { forgotten.push_back(id); }
  std::vector<ProposalRequest> asked;
  std::vector<uint64_t> forgotten;

 private:
  std::vector<TokenId> tokens_;
  int match_length_;
};

class SpeculatorTest : public ::testing::Test {
 protected:
  SpeculatorTest() : allocator_(64, 16) {}

  // A decoding request (all but its last token computed) with `prompt_length` prompt tokens.
  Request* add(SamplingParams params, int prompt_length = 5, bool decoding = true) {
    const uint64_t id = requests_.size() + 1;
    auto r = std::make_unique<Request>(id, std::vector<TokenId>(static_cast<size_t>(prompt_length), 1), allocator_);
    r->num_computed_tokens = decoding ? prompt_length - 1 : prompt_length / 2;
    samplers_.emplace(id, Sampler(std::move(params), /*default_seed=*/id));
    requests_.push_back(std::move(r));
    running_.push_back(requests_.back().get());
    return running_.back();
  }
  std::unique_ptr<Speculator> make(Proposer* proposer, bool always, int num_draft_tokens = 4) {
    return std::make_unique<Speculator>(
        SpeculatorOptions{.proposer = proposer,
                          .num_draft_tokens = num_draft_tokens,
                          .speculate_always = always,
                          .max_model_len = kMaxModelLen},
        metrics_, [this](uint64_t id) -> const Sampler& { return samplers_.at(id); });
  }
  static SamplingParams params(int max_tokens = 16) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    return p;
  }

  kv::PageAllocator allocator_;
  Metrics metrics_;
  std::map<uint64_t, Sampler> samplers_;
  std::vector<std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;
};

TEST_F(SpeculatorTest, AcceptanceIsDecayedCountsWithThePoolAsPrior) {
  FixedProposer proposer({});
  auto s = make(&proposer, /*always=*/true);
  // Nothing measured: the pool's prior (0 + 1) / (0 + 0 + 2) = 0.5, and the request's own
  // (0 + 2 * 0.5) / (0 + 0 + 2) = 0.5.
  EXPECT_DOUBLE_EQ(s->acceptance_of(1, 0), 0.5);
  // Request 1 verifies 4 drafts and accepts 2 (a rejection): own and pool counts 2 accepted,
  // 1 rejected. Prior (2 + 1) / (2 + 1 + 2) = 0.6; own (2 + 1.2) / (2 + 1 + 2) = 0.64.
  s->record_verify(1, 4, 2, 0);
  EXPECT_DOUBLE_EQ(s->acceptance_of(1, 0), 3.2 / 5.0);
  // Request 2 has no counts of its own: (0 + 2 * 0.6) / 2 = 0.6.
  EXPECT_DOUBLE_EQ(s->acceptance_of(2, 0), 0.6);
  // Request 1 verifies 3 and accepts all (no rejection): decayed by 0.9, accepted 0.9 * 2 + 3 =
  // 4.8, rejected 0.9. Prior (4.8 + 1) / (4.8 + 0.9 + 2) = 5.8 / 7.7.
  s->record_verify(1, 3, 3, 0);
  EXPECT_NEAR(s->acceptance_of(1, 0), (4.8 + 2 * (5.8 / 7.7)) / 7.7, 1e-12);
  // Forgetting request 1 drops its own counts (the pool keeps them): (0 + 2 * prior) / 2.
  s->forget(1);
  EXPECT_NEAR(s->acceptance_of(1, 0), 5.8 / 7.7, 1e-12);
  EXPECT_EQ(proposer.forgotten, std::vector<uint64_t>{1});
}

TEST_F(SpeculatorTest, NgramAcceptanceIsPooledByMatchLength) {
  FixedProposer proposer({});
  auto s = make(&proposer, /*always=*/true);
  // A match of length 3 whose 2 drafts are both rejected: class 3 has 0 accepted, 1 rejected;
  // the pool 0 and 1, prior (0 + 1) / (0 + 1 + 2) = 1/3. Class 3: (0 + 2/3) / (0 + 1 + 2) = 2/9.
  s->record_verify(1, 2, 0, 3);
  EXPECT_NEAR(s->acceptance_of(7, 3), 2.0 / 9.0, 1e-12);
  // Class 2 has no counts: (0 + 2/3) / 2 = 1/3, whatever the request.
  EXPECT_NEAR(s->acceptance_of(7, 2), 1.0 / 3.0, 1e-12);
  // Lengths 6 and more share the last class (kMatchClasses - 1 = 6).
  s->record_verify(1, 2, 2, 9);
  // Pool: accepted 0.9 * 0 + 2 = 2, rejected 0.9; prior (2 + 1) / (2 + 0.9 + 2) = 3 / 4.9.
  // Class 6: accepted 2, rejected 0: (2 + 2 * 3 / 4.9) / (2 + 0 + 2).
  EXPECT_NEAR(s->acceptance_of(7, 6), (2 + 2 * (3 / 4.9)) / 4.0, 1e-12);
  EXPECT_NEAR(s->acceptance_of(7, 12), (2 + 2 * (3 / 4.9)) / 4.0, 1e-12);
}

TEST_F(SpeculatorTest, VerifiesCountInTheMetrics) {
  FixedProposer proposer({});
  auto s = make(&proposer, /*always=*/true);
  s->record_verify(1, 4, 2, 0);
  s->record_verify(2, 3, 3, 0);
  const MetricsSnapshot m = metrics_.snapshot();
  EXPECT_EQ(m.spec_num_drafts, 2u);
  EXPECT_EQ(m.spec_num_draft_tokens, 7u);                // 4 + 3
  EXPECT_EQ(m.spec_num_accepted_draft_tokens, 5u);       // 2 + 3
  EXPECT_EQ(m.spec_total_num_accepted_tokens, 7u);       // (2 + 1) + (3 + 1): each verify's bonus token
  EXPECT_EQ(m.spec_total_num_forward_ct, 2u);
  EXPECT_EQ(m.spec_accepted_per_position, (std::vector<uint64_t>{2, 2, 1, 0}));  // positions 1..4
}

TEST_F(SpeculatorTest, DraftsFitEachRequestsRoom) {
  FixedProposer proposer({500, 501, 502, 503, 504});
  auto s = make(&proposer, /*always=*/true, /*num_draft_tokens=*/4);
  Request* wide = add(params(16));                    // room min(4, 16 - 0 - 1, 64 - 5) = 4
  Request* short_tokens = add(params(3));             // room min(4, 3 - 0 - 1, 59) = 2
  Request* near_end = add(params(16), kMaxModelLen - 2);  // room min(4, 15, 64 - 62) = 2
  SamplingParams off = params(16);
  off.speculative = false;
  Request* opted_out = add(off);
  Request* prefilling = add(params(16), 5, /*decoding=*/false);
  Request* last_token = add(params(1));               // room min(4, 1 - 0 - 1, 59) = 0
  ASSERT_TRUE(s->propose(running_));
  EXPECT_EQ(wide->draft, (std::vector<TokenId>{500, 501, 502, 503}));
  EXPECT_EQ(short_tokens->draft, (std::vector<TokenId>{500, 501}));
  EXPECT_EQ(near_end->draft, (std::vector<TokenId>{500, 501}));
  EXPECT_TRUE(opted_out->draft.empty());
  EXPECT_TRUE(prefilling->draft.empty());
  EXPECT_TRUE(last_token->draft.empty());
  ASSERT_EQ(proposer.asked.size(), 3u);
  EXPECT_EQ(proposer.asked[0].max_draft_tokens, 4);
  EXPECT_EQ(proposer.asked[1].max_draft_tokens, 2);
  EXPECT_EQ(s->proposal(wide->id).tokens.size(), 5u) << "the proposal as made; the draft is trimmed";
  // The next step starts from no drafts.
  proposer = FixedProposer({});
  EXPECT_FALSE(s->propose(running_));
  EXPECT_TRUE(wide->draft.empty());
}

// One decoding request, one draft per step; plain steps take 10 ms, 1-draft steps 18 ms.
// Decisions 0-4 measure plain decoding (no drafts), 5-9 one draft (cost_model.h). Decision 10
// compares expected tokens per second at the acceptance measured in those 5 verifies:
//   all accepted: own = pool = 1 + 0.9 + 0.81 + 0.729 + 0.6561 = 4.0951 accepted, 0 rejected;
//     prior (4.0951 + 1) / (4.0951 + 2) = 0.83594, a = (4.0951 + 2 * 0.83594) / 6.0951 = 0.94617;
//     1 draft: 1.94617 tokens / 18 ms = 108.1/s > plain 1 / 10 ms = 100/s: speculate;
//   all rejected: 0 accepted, 4.0951 rejected; prior 1 / 6.0951 = 0.16407, a = 2 * 0.16407 /
//     6.0951 = 0.05384; 1.05384 / 18 ms = 58.5/s, and 58.5 * 1.05 < 100: plain decoding.
TEST_F(SpeculatorTest, TheCostModelDecidesFromTheMeasuredAcceptance) {
  for (const int accepted : {1, 0}) {
    Metrics metrics;
    FixedProposer proposer({500});
    Speculator s({.proposer = &proposer, .num_draft_tokens = 4, .speculate_always = false, .max_model_len = kMaxModelLen},
                 metrics, [this](uint64_t id) -> const Sampler& { return samplers_.at(id); });
    running_.clear();
    Request* r = add(params(64));
    for (int decision = 0; decision < 10; ++decision) {
      const bool drafted = s.propose(running_);
      ASSERT_EQ(drafted, decision >= 5) << "decision " << decision;
      ASSERT_EQ(r->draft.size(), drafted ? 1u : 0u);
      if (drafted) s.record_verify(r->id, 1, accepted, 0);
      s.record_step(drafted ? 1 : 0, 1, drafted ? 0.018 : 0.010);
    }
    EXPECT_EQ(s.propose(running_), accepted == 1) << "accepted per verify: " << accepted;
    EXPECT_EQ(metrics.snapshot().spec_skipped_steps, accepted == 1 ? 5u : 6u);
  }
}

TEST_F(SpeculatorTest, AlwaysSpeculatesWithEveryDraftThatAddsTokens) {
  FixedProposer proposer({500, 501, 502});
  auto s = make(&proposer, /*always=*/true, /*num_draft_tokens=*/8);
  Request* r = add(params(64));
  // No measurement: every step, every proposed draft (3, fewer than the 8 allowed).
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s->propose(running_));
    EXPECT_EQ(r->draft.size(), 3u);
    s->record_step(3, 1, 1.0);
  }
  EXPECT_EQ(metrics_.snapshot().spec_skipped_steps, 0u);
}

TEST_F(SpeculatorTest, NoProposerNoDrafts) {
  auto s = make(nullptr, /*always=*/true);
  Request* r = add(params(64));
  r->draft = {9, 9};  // left over from a step before: cleared
  EXPECT_FALSE(s->enabled());
  EXPECT_FALSE(s->propose(running_));
  EXPECT_TRUE(r->draft.empty());
}

}  // namespace
}  // namespace spindle::engine::speculative
