#include "util/thread_pool.h"

#include <fmt/ranges.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <string>

#include "util/error.h"

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
      {
        std::lock_guard lock(mutex_);
        stopping_ = true;
      }
      wake_.notify_all();
      for (auto& t : workers_) t.join();
      throw;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("SPINDLE_NUM_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

void ThreadPool::run_tasks() {
  const bool was_inside = tls_inside_pool;
  tls_inside_pool = true;
  for (;;) {
    int64_t task;
    const std::function<void(int64_t)>* fn;
    {
      std::lock_guard lock(mutex_);
      if (next_task_ >= num_tasks_) break;
      task = next_task_++;
      fn = fn_;
    }
    try {
      (*fn)(task);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    if (++num_finished_ == num_tasks_) done_.notify_all();
  }
  tls_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_tasks();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1 || tls_inside_pool) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    num_tasks_ = n;
    next_task_ = 0;
    num_finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_tasks();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return num_finished_ == num_tasks_; });
    error = error_;
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace spindle
