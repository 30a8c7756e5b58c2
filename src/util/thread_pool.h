// A fixed pool of worker threads for data-parallel kernels.
//
// parallel_for(n, fn) calls fn(i) once for every i in [0, n), spread over the workers and the
// calling thread, and returns when all calls have finished. The first exception thrown by fn is
// rethrown on the caller after the loop. Calls from inside fn run serially (no nested fan-out).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spindle {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means serial (no workers). 0 means one per usable core.
  explicit ThreadPool(int num_threads = 0);
  // Workers pinned to `cpus` (logical CPU ids, not empty): worker i runs only on
  // cpus[(i + 1) % cpus.size()] (the caller is expected on cpus[0]: pin_current_thread). Throws
  // spindle::Error when the kernel refuses a CPU (not in this process's affinity mask).
  ThreadPool(int num_threads, std::vector<int> cpus);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

  // The process-wide pool (size from SPINDLE_NUM_THREADS, else one per usable core).
  static ThreadPool& global();

 private:
  void worker_loop();
  void run_tasks();

  std::vector<int> cpus_;  // empty: not pinned
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  int64_t next_task_ = 0;       // guarded by mutex_
  int64_t num_finished_ = 0;    // guarded by mutex_
  uint64_t generation_ = 0;     // bumps once per parallel_for
  bool stopping_ = false;
  std::exception_ptr error_;
};

// Usable cores of this process (sched_getaffinity), at least 1.
int num_usable_cores();
// The logical CPU ids this process may run on (sched_getaffinity), ascending; never empty.
std::vector<int> usable_cpus();
// Restricts the calling thread to `cpus` (not empty). Throws spindle::Error when the kernel refuses.
void pin_current_thread(const std::vector<int>& cpus);

}  // namespace spindle
