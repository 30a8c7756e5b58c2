#include "util/thread_pool.h"

#include <fmt/ranges.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>

#include "util/error.h"
#include "util/switches.h"

namespace spindle {
namespace {
thread_local bool tls_inside_pool = false;
}  // namespace

int num_usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

std::vector<int> usable_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) {
    for (int c = 0; c < num_usable_cores(); ++c) cpus.push_back(c);
  }
  return cpus;
}

void pin_current_thread(const std::vector<int>& cpus) {
  SPINDLE_CHECK(!cpus.empty(), "cannot pin a thread to no CPU");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    SPINDLE_CHECK(c >= 0 && c < CPU_SETSIZE, "CPU {} is out of range", c);
    CPU_SET(c, &set);
  }
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  SPINDLE_CHECK(rc == 0, "cannot pin a thread to CPUs {}: {}", fmt::join(cpus, ","), std::strerror(rc));
}

namespace {

// One step of a polling loop: a compiler barrier only, no PAUSE (see thread_pool.h).
inline void cpu_relax() { asm volatile("" ::: "memory"); }

using SpinClock = std::chrono::steady_clock;

// Polls done() for up to `spin` (checking the clock and yielding every 64 polls). Returns whether
// done() became true.
template <class Done>
bool spin_until(Done&& done, std::chrono::microseconds spin) {
  if (done()) return true;
  if (spin.count() <= 0) return false;
  const auto deadline = SpinClock::now() + spin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (SpinClock::now() >= deadline) return done();
    // Other runnable threads on this CPU (a loaded machine; our own caller) run now rather than
    // at the end of our time slice; with none, this returns at once.
    sched_yield();
  }
}

}  // namespace

int ThreadPool::default_spin_us() { return kDefaultSpinUs; }

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = num_usable_cores();
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::ThreadPool(int num_threads, std::vector<int> cpus) : cpus_(std::move(cpus)) {
  SPINDLE_CHECK(!cpus_.empty(), "a pinned thread pool needs at least one CPU");
  if (num_threads <= 0) num_threads = static_cast<int>(cpus_.size());
  for (int i = 1; i < num_threads; ++i) {
    // Each worker pins itself before it waits for work; a refusal is rethrown here.
    std::promise<void> pinned;
    auto ready = pinned.get_future();
    const int cpu = cpus_[static_cast<size_t>(i) % cpus_.size()];
    workers_.emplace_back([this, cpu, &pinned] {
      try {
        pin_current_thread({cpu});
        pinned.set_value();
      } catch (...) {
        pinned.set_exception(std::current_exception());
        return;
      }
      worker_loop();
    });
    try {
      ready.get();
    } catch (...) {
      stopping_.store(true);
      { std::lock_guard lock(mutex_); }
      wake_.notify_all();
      for (auto& t : workers_) t.join();
      throw;
    }
  }
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  { std::lock_guard lock(mutex_); }  // a worker between its predicate check and its wait sees it
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(switches().num_threads);
  return pool;
}

void ThreadPool::record_error() {
  std::lock_guard lock(mutex_);
  if (!error_) error_ = std::current_exception();
}

void ThreadPool::run_tasks(uint64_t gen) {
  const bool was_inside = tls_inside_pool;
  tls_inside_pool = true;
  // Read after seeing `gen` in work_: gen's job, or (when this thread is two calls late) a newer
  // one, in which case work_ has moved on and the compare-and-swap below refuses every claim.
  const Job& job = jobs_[gen & 1];
  const std::function<void(int64_t)>* fn = job.fn.load();
  const int64_t n = job.num_tasks.load();
  uint64_t v = work_.load();
  for (;;) {
    if ((v >> kGenShift) != gen) break;
    const int64_t task = static_cast<int64_t>(v & 0xffffffffu);
    if (task >= n) break;
    if (!work_.compare_exchange_weak(v, v + 1)) continue;  // v reloaded
    try {
      (*fn)(task);
    } catch (...) {
      record_error();
    }
    // seq_cst, then caller_sleeping_'s load: the caller sees this count or we see it sleeping.
    if (finished_.fetch_add(1) + 1 == n && caller_sleeping_.load()) {
      { std::lock_guard lock(mutex_); }
      done_.notify_all();
    }
    v = work_.load();
  }
  tls_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;  // generation 0 is the empty job the pool starts with
  auto called = [&] { return stopping_.load() || (work_.load() >> kGenShift) != seen; };
  for (;;) {
    if (!spin_until(called, std::chrono::microseconds(spin_us()))) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);  // before the predicate's load: parallel_for sees it or we see its call
      wake_.wait(lock, called);
      sleepers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = work_.load() >> kGenShift;
    run_tasks(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1 || tls_inside_pool) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  SPINDLE_CHECK(n < (int64_t{1} << kGenShift), "parallel_for: {} tasks is too many", n);
  std::lock_guard call_lock(call_mutex_);
  const uint64_t gen = ((work_.load() >> kGenShift) + 1) & 0xffffffffu;
  {
    std::lock_guard lock(mutex_);
    error_ = nullptr;
  }
  Job& job = jobs_[gen & 1];
  job.fn.store(&fn);
  job.num_tasks.store(n);
  finished_.store(0);
  work_.store(gen << kGenShift);  // publishes the call (seq_cst: ordered before sleepers_'s load)
  if (sleepers_.load() > 0) {
    { std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }
  run_tasks(gen);
  // The tasks other threads claimed: poll, then sleep until the last one is done.
  auto all_done = [&] { return finished_.load() == n; };
  if (!spin_until(all_done, std::chrono::microseconds(spin_us()))) {
    std::unique_lock lock(mutex_);
    caller_sleeping_.store(true);  // before the predicate's load (see run_tasks)
    done_.wait(lock, all_done);
    caller_sleeping_.store(false);
  }
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace spindle
