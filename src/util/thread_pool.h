// A fixed pool of worker threads for data-parallel kernels.
//
// parallel_for(n, fn) calls fn(i) once for every i in [0, n), spread over the workers and the
// calling thread, and returns when all calls have finished. The first exception thrown by fn is
// rethrown on the caller after the loop. Calls from inside fn run serially (no nested fan-out).
//
// Hand-off: a call publishes its job with one atomic store. Tasks are claimed with a
// compare-and-swap on (generation, next index), so a late worker can never run a task of a newer
// call with an older call's function. A worker that finished polls for the next call for
// spin_us() microseconds (default 200), then sleeps on a condition variable and is woken only
// when it sleeps; the caller runs tasks too, then polls for the claimed ones for the same time
// before it sleeps. Polling loops use no PAUSE (in this project's VM, PAUSE loops halved the rate
// of small products: the hypervisor's pause-loop exiting deschedules the spinning vCPU) and call
// sched_yield every 64 polls, so that other runnable threads are not kept waiting. Measured on the
// shared 2-core VM (bench/results/2026-12-01-cpu-vs-llamacpp-2.md): decode of a 6.8M model 1.5-2x
// faster than sleeping workers when the machine was quiet; under other processes' load, polling
// without the yield was slower than sleeping, with it mostly faster.
#pragma once

#include <atomic>
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

  // The process-wide pool (size from switches().num_threads, SPINDLE_NUM_THREADS, else one per
  // usable core), built at first use.
  static ThreadPool& global();

  // Microseconds a finished worker (and a caller waiting for the workers) polls before it
  // sleeps. Starts at default_spin_us(); may be changed at any time (from any thread).
  int spin_us() const { return spin_us_.load(std::memory_order_relaxed); }
  void set_spin_us(int us) { spin_us_.store(us < 0 ? 0 : us, std::memory_order_relaxed); }
  // 200 us: on a quiet VM the 6.8M decode ran 1.5-2x faster than with sleeping at once (27371ac;
  // the former SPINDLE_POOL_SPIN_US, util/switches.cc). bench/pool_ab sets other values.
  static constexpr int kDefaultSpinUs = 200;
  static int default_spin_us();

 private:
  struct Job {
    std::atomic<const std::function<void(int64_t)>*> fn{nullptr};
    std::atomic<int64_t> num_tasks{0};
  };
  static constexpr int kGenShift = 32;  // work_ = generation << 32 | next task index

  void start_workers(int num_threads, const std::vector<int>& cpus);
  void worker_loop();
  // Claims and runs tasks of generation `gen` until none are left (or a newer call began).
  void run_tasks(uint64_t gen);
  void record_error();

  std::vector<int> cpus_;  // empty: not pinned
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  Job jobs_[2];            // generation g's job is jobs_[g & 1] (a late reader of g - 2's is refused)
  alignas(64) std::atomic<uint64_t> work_{0};
  alignas(64) std::atomic<int64_t> finished_{0};  // tasks of the current call that have returned
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> spin_us_{default_spin_us()};
  std::mutex mutex_;  // sleeping threads and error_
  std::condition_variable wake_;  // workers: a call (or stopping_)
  std::condition_variable done_;  // the caller: the last claimed task finished
  std::exception_ptr error_;
};

// Usable cores of this process (sched_getaffinity), at least 1.
int num_usable_cores();
// The logical CPU ids this process may run on (sched_getaffinity), ascending; never empty.
std::vector<int> usable_cpus();
// Restricts the calling thread to `cpus` (not empty). Throws spindle::Error when the kernel refuses.
void pin_current_thread(const std::vector<int>& cpus);

}  // namespace spindle
