// Shared by the benchmarks: timing and this machine's streaming read bandwidth.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include "util/thread_pool.h"

namespace spindle::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread (seconds): time it was descheduled does not count.
inline double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Best wall time of fn over `reps` runs (after one warm-up run).
inline double best_time(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    fn();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

// Multi-threaded streaming read (sum of 64-bit words) over 1 GiB: GB/s.
inline double memory_read_gbps(ThreadPool& pool) {
  const size_t bytes = size_t{1} << 30;
  const size_t words = bytes / sizeof(uint64_t);
  std::vector<uint64_t> buf(words);
  const int64_t chunks = 256;
  pool.parallel_for(chunks, [&](int64_t c) {  // first touch in parallel
    for (size_t i = c * words / chunks; i < (c + 1) * words / chunks; ++i) buf[i] = i;
  });
  std::vector<uint64_t> sums(chunks);
  const double t = best_time(5, [&] {
    pool.parallel_for(chunks, [&](int64_t c) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      const uint64_t* p = buf.data() + c * words / chunks;
      const size_t n = words / chunks;
      for (size_t i = 0; i < n; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
      sums[c] = s0 + s1 + s2 + s3;
    });
  });
  volatile uint64_t sink = std::accumulate(sums.begin(), sums.end(), uint64_t{0});
  (void)sink;
  return bytes / t / 1e9;
}

}  // namespace spindle::bench
