// The pinned ThreadPool: its workers run only on the CPUs given; pin_current_thread restricts the
// caller; a CPU outside the process's mask is an error, not a silent unpinned pool.
#include "util/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <mutex>
#include <set>
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
