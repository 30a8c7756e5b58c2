#include "util/thread_pool.h"

#include <sched.h>

#include <cstdlib>
#include <string>

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

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = num_usable_cores();
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
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
