// The Scheduler alone: no model, no tokenizer. Requests are token ids and pages; a test "runs" a
// step by marking the plan computed (update) and appending one output token to every sequence
// that got a logits row, as the engine does after sampling. Expected plans are written from the
// policy in scheduler.h (running first, oldest first; chunked prefill within the token budget;
// newest running request preempted when pages run out; waiting requests first come first served
// with prefix reuse), not from Spindle's output. Every test ends with the KV integrity check.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "kv/page_allocator.h"
#include "kv/prefix_cache.h"

namespace spindle::engine {
namespace {

// (request id, new tokens, cached tokens, wants logits) of one scheduled sequence.
struct Scheduled {
  uint64_t id;
  int num_new_tokens;
  int num_cached_tokens;
  bool logits;
  bool operator==(const Scheduled&) const = default;
};

void PrintTo(const Scheduled& s, std::ostream* os) {
  *os << "{id " << s.id << ", new " << s.num_new_tokens << ", cached " << s.num_cached_tokens
      << (s.logits ? ", logits}" : "}");
}

class Harness {
 public:
  Harness(int num_pages, int page_size, int budget, int max_running = 64, bool prefix_cache = true,
          int max_mixed_prefill_tokens = 0)
      : allocator_(num_pages, page_size),
        cache_(allocator_, prefix_cache),
        scheduler_(allocator_, cache_, SchedulerOptions{budget, max_running, 1 << 20, max_mixed_prefill_tokens}) {}

  // A request with `prompt` that finishes after `max_tokens` output tokens; returns its id.
  uint64_t add(std::vector<TokenId> prompt, int max_tokens) {
    const uint64_t id = next_id_++;
    auto r = std::make_unique<Request>(id, std::move(prompt), allocator_);
    max_tokens_[id] = max_tokens;
    scheduler_.add(std::move(r));
    return id;
  }
  // A prompt of n distinct tokens starting at `first`.
  static std::vector<TokenId> tokens(int n, TokenId first) {
    std::vector<TokenId> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), first);
    return t;
  }

  // schedule(), then the step's result: update(), one output token per logits row (token 900 +
  // output length), prompts whose prefill ended published, finished requests released with
  // their pages cached. Returns the plan.
  std::vector<Scheduled> step(int* num_preempted = nullptr) {
    const StepPlan plan = scheduler_.schedule();
    if (num_preempted) *num_preempted = plan.num_preempted;
    std::vector<Scheduled> out;
    int tokens = 0, rows = 0;
    for (const auto& s : plan.sequences) {
      out.push_back({s.request->id, s.num_new_tokens, s.num_cached_tokens, s.logits_row >= 0});
      tokens += s.num_new_tokens;
      if (s.logits_row >= 0) {
        EXPECT_EQ(s.logits_row, rows++) << "logit rows in batch order";
      }
    }
    EXPECT_EQ(plan.num_tokens, tokens);
    EXPECT_EQ(plan.num_logit_rows, rows);
    scheduler_.update(plan);
    for (const auto& s : plan.sequences) {
      Request& r = *s.request;
      if (s.logits_row < 0) continue;
      r.output.push_back(900 + static_cast<TokenId>(r.output.size()));
      if (static_cast<int>(r.output.size()) >= max_tokens_.at(r.id)) r.finished = true;
    }
    scheduler_.publish_prompts(plan);
    for (Request* r : scheduler_.finished_requests()) scheduler_.release(r, /*cache_pages=*/true);
    scheduler_.check_integrity();
    return out;
  }

  Request* find(uint64_t id) const {
    for (Request* r : scheduler_.all_requests()) {
      if (r->id == id) return r;
    }
    return nullptr;
  }
  // Releases (cancels) a request in whatever phase it is.
  void cancel(uint64_t id) {
    Request* r = find(id);
    ASSERT_NE(r, nullptr);
    scheduler_.release(r, /*cache_pages=*/true);
    scheduler_.check_integrity();
  }
  // Releases everything left; every page is then free or cached, none in use.
  void drain() {
    for (Request* r : scheduler_.all_requests()) scheduler_.release(r, /*cache_pages=*/true);
    scheduler_.check_integrity();
    EXPECT_EQ(allocator_.num_in_use_pages(), 0);
    EXPECT_EQ(allocator_.num_free_pages() + allocator_.num_cached_pages(), allocator_.num_pages());
  }

  Scheduler& scheduler() { return scheduler_; }
  kv::PageAllocator& allocator() { return allocator_; }

 private:
  kv::PageAllocator allocator_;
  kv::PrefixCache cache_;
  Scheduler scheduler_;
  std::map<uint64_t, int> max_tokens_;
  uint64_t next_id_ = 1;
};

// A prompt longer than the budget is prefilled in chunks across steps; only the chunk that
// completes the prompt gets a logits row; then one token per step.
TEST(SchedulerTest, ChunkedPrefillAcrossSteps) {
  struct Case {
    int prompt, budget;
    std::vector<std::vector<Scheduled>> steps;
  };
  const Case cases[] = {
      {20, 8, {{{1, 8, 0, false}}, {{1, 8, 8, false}}, {{1, 4, 16, true}}, {{1, 1, 20, true}}, {{1, 1, 21, true}}}},
      {8, 8, {{{1, 8, 0, true}}, {{1, 1, 8, true}}}},
      {9, 4, {{{1, 4, 0, false}}, {{1, 4, 4, false}}, {{1, 1, 8, true}}, {{1, 1, 9, true}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("prompt " + std::to_string(c.prompt) + " budget " + std::to_string(c.budget));
    Harness h(64, 4, c.budget);
    h.add(Harness::tokens(c.prompt, 1), 100);
    for (const auto& want : c.steps) EXPECT_EQ(h.step(), want);
    h.drain();
  }
}

// Two requests share a step's budget: the running one first, the newcomer gets what is left.
TEST(SchedulerTest, BudgetIsSharedRunningFirst) {
  Harness h(64, 4, 10);
  const uint64_t a = h.add(Harness::tokens(6, 1), 100);
  const uint64_t b = h.add(Harness::tokens(12, 100), 100);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 6, 0, true}, {b, 4, 0, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 6, true}, {b, 8, 4, true}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 7, true}, {b, 1, 12, true}}));
  h.drain();
}

// --max-mixed-prefill-tokens: while a running request decodes, prompt tokens (a running prompt's
// chunks and admissions alike) share the smaller cap; decode rows do not count against it. A step
// with nothing decoding keeps the whole budget. Without the cap (0) the same arrivals take the
// whole budget at once.
TEST(SchedulerTest, MixedPrefillCapWhileDecoding) {
  // cap 6, budget 32: a (8) and b (6) arrive together, nothing decodes yet -> both in step 1.
  // Then c (20) and d (4) arrive while a and b decode: 6 prompt tokens per step.
  Harness h(64, 4, /*budget=*/32, 64, true, /*max_mixed_prefill_tokens=*/6);
  const uint64_t a = h.add(Harness::tokens(8, 1), 100);
  const uint64_t b = h.add(Harness::tokens(6, 100), 100);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 0, true}, {b, 6, 0, true}}));
  const uint64_t c = h.add(Harness::tokens(20, 200), 100);
  const uint64_t d = h.add(Harness::tokens(4, 300), 100);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 8, true}, {b, 1, 6, true}, {c, 6, 0, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 9, true}, {b, 1, 7, true}, {c, 6, 6, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 10, true}, {b, 1, 8, true}, {c, 6, 12, false}}));
  // c's last 2 prompt tokens, then d's 4 within the same 6.
  EXPECT_EQ(h.step(),
            (std::vector<Scheduled>{{a, 1, 11, true}, {b, 1, 9, true}, {c, 2, 18, true}, {d, 4, 0, true}}));
  EXPECT_EQ(h.step(),
            (std::vector<Scheduled>{{a, 1, 12, true}, {b, 1, 10, true}, {c, 1, 20, true}, {d, 1, 4, true}}));
  h.drain();

  Harness uncapped(64, 4, /*budget=*/32);
  const uint64_t a2 = uncapped.add(Harness::tokens(8, 1), 100);
  EXPECT_EQ(uncapped.step(), (std::vector<Scheduled>{{a2, 8, 0, true}}));
  const uint64_t c2 = uncapped.add(Harness::tokens(20, 200), 100);
  const uint64_t d2 = uncapped.add(Harness::tokens(4, 300), 100);
  EXPECT_EQ(uncapped.step(), (std::vector<Scheduled>{{a2, 1, 8, true}, {c2, 20, 0, true}, {d2, 4, 0, true}}));
  uncapped.drain();
}

// A step whose only running request is still in its prompt (nothing decodes) is not capped; the
// first step with a decode row is.
TEST(SchedulerTest, MixedPrefillCapOnlyWhenSomethingDecodes) {
  Harness h(64, 4, /*budget=*/16, 64, true, /*max_mixed_prefill_tokens=*/4);
  const uint64_t a = h.add(Harness::tokens(40, 1), 100);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 16, 0, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 16, 16, false}}));
  const uint64_t b = h.add(Harness::tokens(14, 100), 100);
  // a is still in its prompt: no decode row, so the step has the whole budget.
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 32, true}, {b, 8, 0, false}}));
  // Now a decodes: b's remaining 6 prompt tokens go 4 (the cap), then 2.
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 40, true}, {b, 4, 8, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 41, true}, {b, 2, 12, true}}));
  h.drain();
}

// Admission waits for free pages; pages of a finished request (cached or freed) let the next in.
TEST(SchedulerTest, AdmissionByFreePages) {
  Harness h(/*pages=*/6, /*page_size=*/4, /*budget=*/64);
  const uint64_t a = h.add(Harness::tokens(10, 1), 1);    // 3 pages, finishes after one token
  const uint64_t b = h.add(Harness::tokens(10, 100), 5);  // 3 pages
  const uint64_t c = h.add(Harness::tokens(4, 200), 5);   // 1 page: none left in step 1
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 10, 0, true}, {b, 10, 0, true}}));
  EXPECT_EQ(h.scheduler().num_waiting(), 1);
  EXPECT_EQ(h.find(a), nullptr);  // finished and released
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{b, 1, 10, true}, {c, 4, 0, true}}));
  h.drain();
}

// A new request reuses the longest cached prefix of whole pages; at least its last prompt token
// is computed.
TEST(SchedulerTest, PrefixReuse) {
  struct Case {
    int extra_tokens;      // the second prompt: the first 12 tokens plus this many
    int expected_cached;   // tokens served from the cache
  };
  for (const Case c : {Case{3, 12}, Case{0, 8}, Case{1, 12}}) {
    SCOPED_TRACE("extra " + std::to_string(c.extra_tokens));
    Harness h(32, 4, 64);
    const std::vector<TokenId> shared = Harness::tokens(12, 1);
    const uint64_t a = h.add(shared, 1);
    EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 12, 0, true}}));  // finishes: 3 full pages cached
    std::vector<TokenId> prompt = shared;
    for (int i = 0; i < c.extra_tokens; ++i) prompt.push_back(500 + i);
    const uint64_t b = h.add(prompt, 2);
    const int n = static_cast<int>(prompt.size());
    EXPECT_EQ(h.step(), (std::vector<Scheduled>{{b, n - c.expected_cached, c.expected_cached, true}}));
    EXPECT_EQ(h.find(b)->num_cached_prompt_tokens, c.expected_cached);
    h.drain();
  }
}

// Out of pages: the newest running request not yet in this step's plan is preempted (its
// computed pages cached, the rest freed) and goes back to the front of the queue; it is not
// readmitted in the step that preempted it, and comes back through the prefix cache.
TEST(SchedulerTest, PreemptionNewestFirstAndRequeue) {
  Harness h(/*pages=*/7, /*page_size=*/4, /*budget=*/64);
  const uint64_t a = h.add(Harness::tokens(8, 1), 3);
  const uint64_t b = h.add(Harness::tokens(8, 100), 100);
  const uint64_t c = h.add(Harness::tokens(8, 200), 100);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 0, true}, {b, 8, 0, true}, {c, 8, 0, true}}));
  // Token 9 of each needs a third page: A takes the last free one, B preempts C (the newest).
  int preempted = 0;
  EXPECT_EQ(h.step(&preempted), (std::vector<Scheduled>{{a, 1, 8, true}, {b, 1, 8, true}}));
  EXPECT_EQ(preempted, 1);
  Request* rc = h.find(c);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(rc->num_preemptions, 1);
  EXPECT_EQ(rc->num_computed_tokens, 0);
  EXPECT_EQ(h.scheduler().num_waiting(), 1);
  // A finishes after its third token (step 3); C waits for pages, then is recomputed from its
  // cached prompt pages plus its one output token.
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 9, true}, {b, 1, 9, true}}));
  const auto next = h.step();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0], (Scheduled{b, 1, 10, true}));
  EXPECT_EQ(next[1].id, c);
  EXPECT_EQ(next[1].num_cached_tokens + next[1].num_new_tokens, 9);  // prompt 8 + 1 output
  // C's first prompt page is reused; its second (the tree's least recently used leaf) was
  // evicted for B's page in step 2.
  EXPECT_EQ(next[1].num_cached_tokens, 4);
  h.drain();
}

// Preemption by table: the oldest running request takes a page from the newest one not yet
// scheduled; a request whose only possible victims are already in the step gives way itself.
TEST(SchedulerTest, PreemptionVictims) {
  struct Case {
    int num_pages;
    std::vector<Scheduled> step2;  // after A and B (8 tokens, 2 pages each) were prefilled
    uint64_t preempted;            // the request sent back to the queue
  };
  const Case cases[] = {
      {4, {{1, 1, 8, true}}, 2},  // A needs a page, none free: B (newer, not scheduled) is preempted
      {5, {{1, 1, 8, true}}, 2},  // A takes the free page; B's only victim (A) is in the step: B gives way
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("pages " + std::to_string(c.num_pages));
    Harness h(c.num_pages, /*page_size=*/4, /*budget=*/64);
    const uint64_t a = h.add(Harness::tokens(8, 1), 100);
    const uint64_t b = h.add(Harness::tokens(8, 100), 100);
    EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 0, true}, {b, 8, 0, true}}));
    int preempted = 0;
    EXPECT_EQ(h.step(&preempted), c.step2);
    EXPECT_EQ(preempted, 1);
    EXPECT_EQ(h.find(c.preempted)->num_preemptions, 1);
    EXPECT_EQ(h.scheduler().num_waiting(), 1);
    h.drain();
  }
}

// Cancellation (release) at each phase leaves the pool consistent and nothing in use.
TEST(SchedulerTest, CancellationAtEachPhase) {
  enum class Phase { kWaiting, kMidPrefill, kDecoding, kPreempted };
  for (const Phase phase : {Phase::kWaiting, Phase::kMidPrefill, Phase::kDecoding, Phase::kPreempted}) {
    SCOPED_TRACE(static_cast<int>(phase));
    Harness h(/*pages=*/7, /*page_size=*/4, /*budget=*/phase == Phase::kMidPrefill ? 4 : 64);
    const uint64_t a = h.add(Harness::tokens(8, 1), 100);
    const uint64_t b = h.add(Harness::tokens(8, 100), 100);
    const uint64_t c = h.add(Harness::tokens(8, 200), 100);
    uint64_t victim = c;
    switch (phase) {
      case Phase::kWaiting:
        break;  // nothing scheduled yet
      case Phase::kMidPrefill:
        h.step();  // A's first 4 tokens
        victim = a;
        EXPECT_EQ(h.find(a)->num_computed_tokens, 4);
        break;
      case Phase::kDecoding:
        h.step();
        h.step();
        victim = b;
        break;
      case Phase::kPreempted:
        h.step();
        h.step();  // C is preempted (see PreemptionNewestFirstAndRequeue)
        ASSERT_EQ(h.find(c)->num_preemptions, 1);
        break;
    }
    h.cancel(victim);
    EXPECT_EQ(h.find(victim), nullptr);
    // The others still run to completion.
    for (int i = 0; i < 4; ++i) h.step();
    h.drain();
  }
}

// Requests with one prompt submitted together (the n choices of one request) compute it once:
// the first prefills it, the others wait until its prefill ends and its prompt pages are
// published, then reuse every full page of their context (page size 4: 10 tokens, 9 matched ->
// 2 pages, 8 tokens) and compute only the rest. Every page is referenced by all four.
TEST(SchedulerTest, SharedPromptIsComputedOnce) {
  Harness h(64, 4, 64);
  const std::vector<TokenId> prompt = Harness::tokens(10, 1);
  const uint64_t a = h.add(prompt, 3);
  const uint64_t b = h.add(prompt, 3), c = h.add(prompt, 3), d = h.add(prompt, 3);
  const uint64_t other = h.add(Harness::tokens(6, 100), 3);  // unrelated: not held up by the wait
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 10, 0, true}, {other, 6, 0, true}}));
  EXPECT_EQ(h.scheduler().num_waiting(), 3);
  EXPECT_TRUE(h.find(a)->prompt_published);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{
                          {a, 1, 10, true}, {other, 1, 6, true}, {b, 2, 8, true}, {c, 2, 8, true}, {d, 2, 8, true}}));
  for (const uint64_t id : {b, c, d}) EXPECT_EQ(h.find(id)->num_cached_prompt_tokens, 8);
  EXPECT_EQ(h.find(a)->num_cached_prompt_tokens, 0);
  EXPECT_EQ(h.allocator().ref_count(h.find(a)->table.pages()[0]), 4);
  EXPECT_EQ(h.allocator().ref_count(h.find(a)->table.pages()[1]), 4);
  for (int i = 0; i < 3; ++i) h.step();
  h.drain();
}

// A chunked prefill: the others wait through every chunk, though budget is left in the step.
TEST(SchedulerTest, SharedPromptWaitsForEveryChunk) {
  Harness h(64, 4, 8);
  const std::vector<TokenId> prompt = Harness::tokens(20, 1);
  const uint64_t a = h.add(prompt, 2);
  const uint64_t b = h.add(prompt, 2);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 0, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 8, false}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 4, 16, true}}));
  // 19 tokens matched: 4 pages, 16 tokens; the last 4 computed.
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 1, 20, true}, {b, 4, 16, true}}));
  h.drain();
}

// The first one cancelled mid-prefill: the next stops waiting and reuses the pages it computed
// (cached at release); the third then waits for the second, which is now computing the prompt.
TEST(SchedulerTest, SharedPromptFirstCancelled) {
  Harness h(64, 4, 8);
  const std::vector<TokenId> prompt = Harness::tokens(20, 1);
  const uint64_t a = h.add(prompt, 2);
  const uint64_t b = h.add(prompt, 2), c = h.add(prompt, 2);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 8, 0, false}}));
  h.cancel(a);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{b, 8, 8, false}}));
  EXPECT_EQ(h.find(b)->num_cached_prompt_tokens, 8);
  EXPECT_EQ(h.scheduler().num_waiting(), 1);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{b, 4, 16, true}}));
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{b, 1, 20, true}, {c, 4, 16, true}}));
  h.drain();
}

// The first one preempted mid-prefill: it goes back to the front of the queue (so no request
// waits for it while it waits), is readmitted on its cached page, and the other waits for it
// again until its prefill ends.
TEST(SchedulerTest, SharedPromptFirstPreempted) {
  Harness h(/*pages=*/5, /*page_size=*/4, /*budget=*/8);
  const uint64_t old = h.add(Harness::tokens(4, 100), 4);  // 4 + 4 tokens: 2 pages
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{old, 4, 0, true}}));
  const std::vector<TokenId> prompt = Harness::tokens(16, 1);
  const uint64_t a = h.add(prompt, 2);
  const uint64_t b = h.add(prompt, 2);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{old, 1, 4, true}, {a, 7, 0, false}}));
  // A's next 7 tokens need 2 more pages, 1 is free and its only possible victim is in the step.
  int preempted = 0;
  EXPECT_EQ(h.step(&preempted), (std::vector<Scheduled>{{old, 1, 5, true}}));
  EXPECT_EQ(preempted, 1);
  EXPECT_EQ(h.find(a)->num_preemptions, 1);
  EXPECT_FALSE(h.find(a)->prompt_published);
  EXPECT_EQ(h.scheduler().num_waiting(), 2);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{old, 1, 6, true}, {a, 7, 4, false}}));  // `old` finishes
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 5, 11, true}}));
  EXPECT_TRUE(h.find(a)->prompt_published);
  EXPECT_EQ(h.find(b)->num_computed_tokens, 0);
  for (int i = 0; i < 4; ++i) h.step();
  EXPECT_EQ(h.find(a), nullptr);
  EXPECT_EQ(h.find(b), nullptr);
  h.drain();
}

// Little shared (one page of five) is not worth waiting for; nor is anything with the prefix
// cache off (nothing would be published).
TEST(SchedulerTest, SharedPromptWaitOnlyWhenWorthIt) {
  {
    Harness h(64, 4, 64);
    std::vector<TokenId> b_prompt = Harness::tokens(4, 1);
    for (TokenId t : Harness::tokens(17, 500)) b_prompt.push_back(t);
    const uint64_t a = h.add(Harness::tokens(21, 1), 2);
    const uint64_t b = h.add(b_prompt, 2);
    EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 21, 0, true}, {b, 21, 0, true}}));
    h.drain();
  }
  {
    Harness h(64, 4, 64, 64, /*prefix_cache=*/false);
    const uint64_t a = h.add(Harness::tokens(10, 1), 2);
    const uint64_t b = h.add(Harness::tokens(10, 1), 2);
    EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 10, 0, true}, {b, 10, 0, true}}));
    h.drain();
  }
}

// --max-running-requests bounds the running batch; the next waiting request is admitted when a
// slot frees.
TEST(SchedulerTest, RunningLimit) {
  Harness h(64, 4, 64, /*max_running=*/2);
  const uint64_t a = h.add(Harness::tokens(4, 1), 1);
  const uint64_t b = h.add(Harness::tokens(4, 100), 5);
  const uint64_t c = h.add(Harness::tokens(4, 200), 5);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{a, 4, 0, true}, {b, 4, 0, true}}));
  EXPECT_EQ(h.scheduler().num_running(), 1);  // A finished
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{b, 1, 4, true}, {c, 4, 0, true}}));
  h.drain();
}

// A prompt needing more pages than the whole pool is taken out of the queue (not blocking the
// requests behind it); a running request that grows past the pool is taken out too.
TEST(SchedulerTest, RequestLongerThanThePool) {
  Harness h(/*pages=*/4, /*page_size=*/4, /*budget=*/64);
  const uint64_t big = h.add(Harness::tokens(17, 1), 10);    // 5 pages
  const uint64_t small = h.add(Harness::tokens(15, 100), 10);  // 4 pages: the whole pool
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{small, 15, 0, true}}));
  ASSERT_EQ(h.scheduler().over_capacity_requests().size(), 1u);
  EXPECT_EQ(h.scheduler().over_capacity_requests()[0]->id, big);
  h.scheduler().release(h.find(big), /*cache_pages=*/false);
  EXPECT_EQ(h.step(), (std::vector<Scheduled>{{small, 1, 15, true}}));  // token 16 fills the pool
  EXPECT_TRUE(h.step().empty());                                        // 17 tokens cannot fit
  ASSERT_EQ(h.scheduler().over_capacity_requests().size(), 1u);
  EXPECT_EQ(h.scheduler().over_capacity_requests()[0]->id, small);
  EXPECT_EQ(h.allocator().num_in_use_pages(), 0);
  h.drain();
}

}  // namespace
}  // namespace spindle::engine

namespace spindle::engine {
namespace {

// Speculative decoding in the scheduler (scheduler.h): a decoding request with k drafts is
// scheduled as 1 + k new tokens with 1 + k logit rows; update() counts only its last context
// token computed; finish_speculation() after the engine appended the accepted tokens leaves every
// token but the last computed and frees the pages past it. Expected numbers are from that rule
// (page size 4).
TEST(SchedulerSpeculationTest, DraftsAreScheduledAndRejectedPositionsRolledBack) {
  kv::PageAllocator allocator(16, 4);
  kv::PrefixCache cache(allocator);
  Scheduler scheduler(allocator, cache, SchedulerOptions{64, 8, 1 << 20});
  auto owned = std::make_unique<Request>(1, std::vector<TokenId>{10, 11, 12, 13, 14}, allocator);
  Request& r = *owned;
  scheduler.add(std::move(owned));
  // Prefill: 5 tokens, 2 pages.
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  scheduler.update(plan);
  r.output.push_back(20);  // context 6 tokens, 5 computed
  EXPECT_EQ(r.num_computed_tokens, 5);

  // Verify step with 6 drafts: positions 5..11 written, 7 logit rows, table grows to 12 tokens = 3 pages.
  r.draft = {21, 22, 23, 24, 25, 26};
  plan = scheduler.schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 7);
  EXPECT_EQ(plan.sequences[0].num_draft_tokens, 6);
  EXPECT_EQ(plan.sequences[0].num_cached_tokens, 5);
  EXPECT_EQ(plan.num_logit_rows, 7);
  EXPECT_EQ(plan.sequences[0].num_logit_rows(), 7);
  EXPECT_EQ(r.table.num_tokens(), 12);
  EXPECT_EQ(r.table.num_pages(), 3);
  scheduler.update(plan);
  EXPECT_EQ(r.num_computed_tokens, 6) << "drafts are not computed until verified";
  // Two drafts accepted, then the target's own token: output 20, 21, 22, 30 -> context 9 tokens.
  r.output.insert(r.output.end(), {21, 22, 30});
  scheduler.finish_speculation(r);
  EXPECT_TRUE(r.draft.empty());
  EXPECT_EQ(r.num_computed_tokens, 8);
  EXPECT_EQ(r.table.num_tokens(), 8);
  EXPECT_EQ(r.table.num_pages(), 2) << "the page holding only rejected positions 8..11 is freed";
  EXPECT_EQ(allocator.num_in_use_pages(), 2);
  scheduler.check_integrity();

  // Drafts beyond the budget are trimmed: budget 64 is plenty, but a pool with no free page past
  // the current one drops the drafts and decodes one token.
  r.draft = {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
             66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91,
             92, 93, 94, 95, 96, 97, 98, 99, 100};
  plan = scheduler.schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].num_new_tokens, 1) << "57 pages needed for 61 drafts, 16 in the pool: no drafts";
  EXPECT_EQ(plan.sequences[0].num_draft_tokens, 0);
  EXPECT_TRUE(r.draft.empty());
  scheduler.update(plan);
  r.output.push_back(31);
  r.finished = true;
  scheduler.release(&r, /*cache_pages=*/true);
  scheduler.check_integrity();
  EXPECT_EQ(allocator.num_in_use_pages(), 0);
}

// Prompt rows (Request::wants_prompt_rows, prompt logprobs): each chunk gets a logit row for each
// of its prompt positions p < P - 1 whose row the request has not had, right before the sampling
// row; admission reads no cached page past the rows it has (none: nothing cached is read; 8
// rows had, as after a preemption: the first 8 tokens' pages), and a plain request reads them all.
TEST(SchedulerTest, PromptRowsPerChunkAndNoCachedPagesPastThem) {
  kv::PageAllocator allocator(16, 4);
  kv::PrefixCache cache(allocator);
  Scheduler scheduler(allocator, cache, SchedulerOptions{5, 8, 1 << 10, 0});
  const std::vector<TokenId> prompt = Harness::tokens(12, 100);
  auto add = [&](uint64_t id, bool rows, int done) {
    auto r = std::make_unique<Request>(id, prompt, allocator);
    r->wants_prompt_rows = rows;
    r->num_prompt_rows_done = done;
    Request* raw = r.get();
    scheduler.add(std::move(r));
    return raw;
  };
  // Runs one step; returns (first prompt row position, prompt rows, has a sampling row) of the
  // one planned sequence and marks its rows had, as the engine does.
  auto step = [&](Request* r) {
    const StepPlan plan = scheduler.schedule();
    EXPECT_EQ(plan.sequences.size(), 1u);
    const ScheduledSequence& s = plan.sequences.at(0);
    EXPECT_EQ(s.request, r);
    EXPECT_EQ(plan.num_logit_rows, s.num_all_logit_rows());
    if (s.num_prompt_rows > 0) {
      EXPECT_EQ(s.prompt_rows_offset, 0);
      EXPECT_EQ(s.first_prompt_row + s.num_all_logit_rows(), s.num_cached_tokens + s.num_new_tokens)
          << "the logit rows are the chunk's last rows";
      r->num_prompt_rows_done = s.first_prompt_row + s.num_prompt_rows;
    }
    if (s.logits_row >= 0) EXPECT_EQ(s.logits_row, s.num_prompt_rows);
    scheduler.update(plan);
    scheduler.publish_prompts(plan);
    return std::tuple{s.first_prompt_row, s.num_prompt_rows, s.logits_row >= 0};
  };
  Request* a = add(1, true, 0);
  EXPECT_EQ(step(a), std::tuple(0, 5, false));
  EXPECT_EQ(step(a), std::tuple(5, 5, false));
  EXPECT_EQ(step(a), std::tuple(10, 1, true)) << "positions 10 and 11: one prompt row, then the sampling row";
  EXPECT_TRUE(a->prompt_rows_complete());
  a->finished = true;
  scheduler.release(a, /*cache_pages=*/true);  // 12 tokens computed: pages of tokens 0-3, 4-7, 8-11 cached

  Request* b = add(2, true, 0);
  EXPECT_EQ(step(b), std::tuple(0, 5, false));
  EXPECT_EQ(b->num_cached_prompt_tokens, 0) << "no row had: nothing cached is read";
  b->finished = true;
  scheduler.release(b, false);
  Request* c = add(3, true, 8);  // as after a preemption with rows 0-7 had
  EXPECT_EQ(step(c), std::tuple(8, 3, true));
  EXPECT_EQ(c->num_computed_tokens, 12);
  c->finished = true;
  scheduler.release(c, false);
  Request* d = add(4, false, 0);
  const StepPlan plain = scheduler.schedule();
  ASSERT_EQ(plain.sequences.size(), 1u);
  EXPECT_EQ(plain.sequences[0].num_cached_tokens, 8) << "a plain request reads every full page but the last token's";
  EXPECT_EQ(plain.sequences[0].num_prompt_rows, 0);
  scheduler.update(plain);
  d->finished = true;
  scheduler.release(d, false);
  scheduler.check_integrity();
}

}  // namespace
}  // namespace spindle::engine
