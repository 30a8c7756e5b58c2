#include "engine/scheduler.h"

#include <algorithm>

#include "util/error.h"

namespace spindle::engine {

Scheduler::Scheduler(kv::PageAllocator& allocator, kv::PrefixCache& prefix_cache, SchedulerOptions options)
    : allocator_(allocator), prefix_cache_(prefix_cache), options_(options) {
  SPINDLE_CHECK(options_.max_num_batched_tokens > 0 && options_.max_running_requests > 0 && options_.max_model_len > 0,
                "scheduler limits must be positive");
}

void Scheduler::add(std::unique_ptr<Request> request) { waiting_.push_back(std::move(request)); }

void Scheduler::add_to_plan(Request& r, int n, StepPlan& plan, int num_draft_tokens) {
  ScheduledSequence s;
  s.request = &r;
  s.num_new_tokens = n;
  s.num_cached_tokens = r.num_computed_tokens;
  s.num_draft_tokens = num_draft_tokens;
  if (r.wants_prompt_rows) {
    const int first = std::max(r.num_computed_tokens, r.num_prompt_rows_done);
    const int end = std::min(r.num_computed_tokens + n - num_draft_tokens, static_cast<int>(r.prompt.size()) - 1);
    if (end > first) {
      s.prompt_rows_offset = plan.num_logit_rows;
      s.num_prompt_rows = end - first;
      s.first_prompt_row = first;
      plan.num_logit_rows += s.num_prompt_rows;
    }
  }
  if (r.num_computed_tokens + n - num_draft_tokens == r.num_tokens()) {
    s.logits_row = plan.num_logit_rows;
    plan.num_logit_rows += s.num_logit_rows();
  }
  plan.num_tokens += n;
  plan.sequences.push_back(s);
}

bool Scheduler::try_schedule_with_draft(Request& r, StepBudget& budget, StepPlan& plan) {
  // The last token and as many drafts as the budget, the model length and the free pages allow
  // (never preempting anyone for a draft).
  const int room = std::min(budget.tokens - 1, options_.max_model_len - r.num_tokens());
  const int k = std::min(static_cast<int>(r.draft.size()), std::max(0, room));
  if (k <= 0) return false;
  const int n = 1 + k;
  if (!r.table.extend(std::max(0, r.num_computed_tokens + n - r.table.num_tokens()))) return false;
  r.draft.resize(static_cast<size_t>(k));
  add_to_plan(r, n, plan, k);
  budget.tokens -= n;
  return true;
}

void Scheduler::preempt(Request& r) {
  // Keep what was computed as cached pages (cheap to reuse when it comes back), free the rest.
  const auto all = r.all_tokens();  // pending tokens (still on the device) are not cached
  const int cached = std::min({r.num_computed_tokens, r.table.num_tokens(), static_cast<int>(all.size())});
  if (cached > 0) {
    prefix_cache_.insert(std::span<const TokenId>(all.data(), cached), r.table);
  }
  r.table.free();
  r.draft.clear();
  r.num_computed_tokens = 0;
  ++r.num_preemptions;
  r.preempted = true;
  r.prompt_published = false;
}

bool Scheduler::try_schedule_running(Request& r, StepBudget& budget, StepPlan& plan) {
  const int remaining = r.num_tokens() - r.num_computed_tokens;
  if (remaining == 1 && !r.draft.empty() && try_schedule_with_draft(r, budget, plan)) return true;
  r.draft.clear();
  const bool decoding = remaining == 1;
  const int n = std::min(remaining, decoding ? budget.tokens : budget.prompt_room());
  if (n <= 0) return true;  // no budget this step; stays running
  // Pages for the new tokens; preempt the newest others while short.
  while (!r.table.extend(std::max(0, r.num_computed_tokens + n - r.table.num_tokens()))) {
    Request* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (it->get() != &r && !(*it)->preempted && !(*it)->finished && (*it)->table.num_pages() > 0) {
        const bool in_plan = std::any_of(plan.sequences.begin(), plan.sequences.end(),
                                         [&](const ScheduledSequence& s) { return s.request == it->get(); });
        if (!in_plan) {
          victim = it->get();
          break;
        }
      }
    }
    if (victim == nullptr) return false;  // r itself must give way
    preempt(*victim);
    ++plan.num_preempted;
  }
  add_to_plan(r, n, plan);
  budget.tokens -= n;
  if (!decoding) budget.prompt_tokens -= n;
  return true;
}

bool Scheduler::try_admit(Request& r, StepBudget& budget, StepPlan& plan) {
  if (r.table.num_pages() == 0 && r.num_computed_tokens == 0) {
    // Reuse the longest cached prefix; at least the last token is always computed.
    const auto all = r.all_tokens();
    // A request that still wants prompt rows computes every position from the first missing one.
    const size_t usable = r.prompt_rows_complete() ? all.size() - 1
                                                   : std::min(all.size() - 1, static_cast<size_t>(r.num_prompt_rows_done));
    const auto pages = prefix_cache_.match(std::span<const TokenId>(all.data(), usable));
    if (!pages.empty()) {
      r.table.assign_prefix(pages);
      r.num_computed_tokens = r.table.num_tokens();
      if (r.num_preemptions == 0) r.num_cached_prompt_tokens = r.num_computed_tokens;
    }
  }
  const int n = std::min(r.num_tokens() - r.num_computed_tokens, budget.prompt_room());
  if (n <= 0 || !r.table.extend(std::max(0, r.num_computed_tokens + n - r.table.num_tokens()))) {
    r.table.free();  // give the prefix pages back to the cache; retry next step
    r.num_computed_tokens = 0;
    return false;
  }
  add_to_plan(r, n, plan);
  budget.tokens -= n;
  budget.prompt_tokens -= n;
  return true;
}

bool Scheduler::fits_pool(const Request& r) const {
  const int64_t page = allocator_.page_size();
  return (int64_t{r.num_tokens()} + page - 1) / page <= allocator_.num_pages();
}

namespace {
// Full pages of `r`'s context (prompt + output but the last token, what try_admit matches)
// that `prompt` starts with.
int num_shared_pages(const std::vector<TokenId>& prompt, const Request& r, int page_size) {
  const int n = std::min(static_cast<int>(prompt.size()), r.num_tokens() - 1);
  int i = 0;
  while (i < n && prompt[static_cast<size_t>(i)] == r.token_at(i)) ++i;
  return i / page_size;
}
}  // namespace

bool Scheduler::waits_for_shared_prompt(const Request& r) const {
  if (!prefix_cache_.enabled()) return false;  // nothing would be published to wait for
  if (!r.prompt_rows_complete()) return false;  // it would not read the pages it waited for
  const int page_size = allocator_.page_size();
  const int num_pages = (r.num_tokens() - 1) / page_size;
  int in_flight = 0;  // the most pages of r's context one running, unpublished prompt will publish
  for (const auto& q : running_) {
    if (q->preempted || q->prompt_published) continue;
    in_flight = std::max(in_flight, num_shared_pages(q->prompt, r, page_size));
  }
  if (in_flight == 0 || 2 * in_flight < num_pages) return false;
  const auto all = r.all_tokens();
  return in_flight > prefix_cache_.num_cached_pages(std::span<const TokenId>(all.data(), all.size() - 1));
}

void Scheduler::publish_prompts(const StepPlan& plan) {
  for (const auto& s : plan.sequences) {
    Request& r = *s.request;
    if (r.prompt_published || r.failed || r.num_computed_tokens < static_cast<int>(r.prompt.size())) continue;
    prefix_cache_.insert(r.prompt, r.table);  // full pages only; chunks already cached keep their page
    r.prompt_published = true;
  }
}

std::vector<Request*> Scheduler::running_requests_in_order() const {
  std::vector<Request*> out;
  for (const auto& r : running_) out.push_back(r.get());
  return out;
}

StepBudget Scheduler::step_budget() const {
  StepBudget budget{options_.max_num_batched_tokens, options_.max_num_batched_tokens};
  if (options_.max_mixed_prefill_tokens <= 0) return budget;
  // A running request with one token left to compute decodes this step (schedule() skips the
  // finished and the held ones).
  const bool decodes = std::any_of(running_.begin(), running_.end(), [](const auto& r) {
    return !r->finished && !r->hold && !r->preempted && r->num_tokens() - r->num_computed_tokens == 1;
  });
  if (decodes) budget.prompt_tokens = options_.max_mixed_prefill_tokens;
  return budget;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  StepBudget budget = step_budget();

  // 1. Running requests, oldest first. One that cannot get pages even after preempting every
  //    newer one gives way itself.
  for (Request* r : running_requests_in_order()) {
    // Finished while a step with it was in flight (the overlap schedule releases it after that step),
    // or held by the engine this step.
    if (r->finished || r->hold) continue;
    if (!fits_pool(*r)) {  // grew past the whole pool: it can never run again
      r->table.free();
      r->exceeds_pool = true;
      continue;
    }
    if (!r->preempted && !try_schedule_running(*r, budget, plan)) {
      preempt(*r);
      ++plan.num_preempted;
    }
  }
  // Everything preempted this step (victims and requests that gave way) goes back to the front of
  // the queue in admission order, so the oldest is readmitted first -- but not in this step.
  std::vector<std::unique_ptr<Request>> preempted;
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->exceeds_pool) {
      over_capacity_.push_back(std::move(*it));
      it = running_.erase(it);
    } else if ((*it)->preempted) {
      preempted.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  const size_t num_just_preempted = preempted.size();
  for (auto it = preempted.rbegin(); it != preempted.rend(); ++it) waiting_.push_front(std::move(*it));

  // 2. Waiting requests, first come first served.
  if (num_just_preempted > 0) return plan;  // pages are short: let this step's work finish first
  //    One waiting for a running request's prompt is passed over (it keeps its place).
  size_t next = 0;
  while (next < waiting_.size() && budget.prompt_room() > 0 &&
         static_cast<int>(running_.size()) < options_.max_running_requests) {
    const auto it = waiting_.begin() + static_cast<std::ptrdiff_t>(next);
    Request& r = **it;
    if (!fits_pool(r)) {
      r.exceeds_pool = true;
      over_capacity_.push_back(std::move(*it));
      waiting_.erase(it);
      continue;
    }
    if (waits_for_shared_prompt(r)) {
      ++next;
      continue;
    }
    if (!try_admit(r, budget, plan)) break;
    r.preempted = false;
    running_.push_back(std::move(*it));
    waiting_.erase(it);
  }
  return plan;
}

void Scheduler::update(const StepPlan& plan) {
  for (const auto& s : plan.sequences) s.request->num_computed_tokens += s.num_new_tokens - s.num_draft_tokens;
}

void Scheduler::finish_speculation(Request& r) {
  r.draft.clear();
  r.num_computed_tokens = r.num_tokens() - 1;
  r.table.truncate(r.num_computed_tokens);
}

void Scheduler::release(Request* request, bool cache_pages) {
  if (cache_pages && request->num_computed_tokens > 0) {
    const auto all = request->all_tokens();
    // A token computed by a step in flight whose result was then dropped is not cached.
    const int n = std::min({request->num_computed_tokens, request->table.num_tokens(), static_cast<int>(all.size())});
    prefix_cache_.insert(std::span<const TokenId>(all.data(), n), request->table);
  }
  request->table.free();
  auto drop = [&](auto& container) {
    for (auto it = container.begin(); it != container.end(); ++it) {
      if (it->get() == request) {
        container.erase(it);
        return true;
      }
    }
    return false;
  };
  if (!drop(running_) && !drop(waiting_)) drop(over_capacity_);
}

std::vector<Request*> Scheduler::all_requests() const {
  std::vector<Request*> out;
  for (const auto& r : running_) out.push_back(r.get());
  for (const auto& r : waiting_) out.push_back(r.get());
  for (const auto& r : over_capacity_) out.push_back(r.get());
  return out;
}

std::vector<Request*> Scheduler::over_capacity_requests() const {
  std::vector<Request*> out;
  for (const auto& r : over_capacity_) out.push_back(r.get());
  return out;
}

std::vector<Request*> Scheduler::finished_requests() const {
  std::vector<Request*> out;
  for (const auto& r : running_) {
    if (r->finished) out.push_back(r.get());
  }
  return out;
}

void Scheduler::check_integrity() const {
  std::vector<const kv::BlockTable*> live;
  for (const auto& r : running_) live.push_back(&r->table);
  for (const auto& r : waiting_) live.push_back(&r->table);
  for (const auto& r : over_capacity_) live.push_back(&r->table);
  kv::check_integrity(prefix_cache_, live);
}

}  // namespace spindle::engine
