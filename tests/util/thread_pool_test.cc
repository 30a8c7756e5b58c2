// The pinned ThreadPool: its workers run only on the CPUs given; pin_current_thread restricts the
// caller; a CPU outside the process's mask is an error, not a silent unpinned pool.
#include "util/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <chrono>

#include "util/error.h"

namespace spindle {
namespace {

TEST(ThreadPoolTest, PinnedWorkersRunOnlyOnTheirCpus) {
  const std::vector<int> cpus = usable_cpus();
  ASSERT_FALSE(cpus.empty());
  const std::vector<int> one = {cpus.back()};
  ThreadPool pool(3, one);
  EXPECT_EQ(pool.num_threads(), 3);
  const auto caller = std::this_thread::get_id();
  std::mutex mutex;
  std::vector<std::vector<int>> worker_masks;
  std::vector<int> out(64, 0);
  pool.parallel_for(64, [&](int64_t i) {
    out[static_cast<size_t>(i)] = static_cast<int>(i);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // so the workers take some tasks
    if (std::this_thread::get_id() == caller) return;
    std::lock_guard lock(mutex);
    worker_masks.push_back(usable_cpus());
  });
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], i);
  ASSERT_FALSE(worker_masks.empty()) << "no task ran on a worker";
  for (const auto& mask : worker_masks) EXPECT_EQ(mask, one);
}

// Many back-to-back calls of different sizes (the hand-off's generations): every index runs
// exactly once per call, with the workers sleeping between calls (spin 0) and polling (spin 50).
TEST(ThreadPoolTest, EveryTaskRunsOnceAcrossManyCalls) {
  for (int spin : {0, 50}) {
    ThreadPool pool(3);  // more threads than this VM's cores: late and preempted workers happen
    pool.set_spin_us(spin);
    EXPECT_EQ(pool.spin_us(), spin);
    std::vector<std::atomic<int>> hits(98);  // n is at most 97; hits[n] must stay 0
    for (int call = 0; call < 3000; ++call) {
      const int64_t n = 2 + call % 96;
      for (auto& h : hits) h.store(0);
      pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "call " << call << " task " << i;
      ASSERT_EQ(hits[static_cast<size_t>(n)].load(), 0) << "call " << call << " ran past n";
    }
  }
}

TEST(ThreadPoolTest, AnExceptionIsRethrownAndThePoolStaysUsable) {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(16,
                                 [&](int64_t i) {
                                   ran.fetch_add(1);
                                   if (i == 5) throw std::runtime_error("task 5");
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 16);  // the other tasks still ran
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t i) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPoolTest, NestedCallsRunSerially) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](int64_t) {
    const auto self = std::this_thread::get_id();
    pool.parallel_for(8, [&](int64_t) {
      EXPECT_EQ(std::this_thread::get_id(), self);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 32);
}

TEST(ThreadPoolTest, PinCurrentThreadRestrictsAndRestores) {
  const std::vector<int> cpus = usable_cpus();
  pin_current_thread({cpus.front()});
  EXPECT_EQ(usable_cpus(), std::vector<int>{cpus.front()});
  pin_current_thread(cpus);
  EXPECT_EQ(usable_cpus(), cpus);
}

TEST(ThreadPoolTest, ACpuOutsideTheMaskIsAnError) {
  EXPECT_THROW(ThreadPool(2, std::vector<int>{CPU_SETSIZE - 1}), Error);
  EXPECT_THROW(ThreadPool(2, std::vector<int>{}), Error);
  EXPECT_THROW(pin_current_thread({}), Error);
}

}  // namespace
}  // namespace spindle
