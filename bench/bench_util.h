// Shared by the benchmarks: timing and this machine's streaming read bandwidth.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdlib>
#include <immintrin.h>
#include <utility>
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

// This machine's streaming read bandwidth over 1 GiB (first touched in parallel), all of the pool's
// threads, as the fastest of several readers (each chunk of 4 MiB one task):
//   sum64           the sum of 64-bit words, one sequential stream per task (the probe until
//                   2026-12-07; on a 2-core Sapphire Rapids VM Spindle's bf16 decode read 131% of it)
//   avx2 xS         32-byte loads from S streams per task (the chunk split in S contiguous parts, one
//                   64-byte line from each in turn), as a decode kernel reads S weight rows at once
//   avx512 xS       the same with 64-byte loads (where AVX-512F is usable)
//   ... +pf         and a software prefetch of each stream 1 KiB ahead
// A decode step that reads its weights once is bounded by the fastest: a kernel that beats the
// probe means the probe, not the kernel, is wrong.
struct ReadBandwidth {
  const char* reader;
  double gbps;
};

namespace detail {

inline uint64_t read_sum64(const uint64_t* p, size_t words) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < words; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  return s0 + s1 + s2 + s3;
}

template <int S, bool kPrefetch>
__attribute__((target("avx2"))) inline uint64_t read_avx2(const uint64_t* p, size_t words) {
  const size_t part = words / S;  // words per stream (a multiple of 8: one 64-byte line)
  __m256i acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm256_setzero_si256();
  for (size_t i = 0; i < part; i += 8) {
    for (int s = 0; s < S; ++s) {
      const uint64_t* q = p + s * part + i;
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(q + 128), _MM_HINT_T0);
      const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 4));
      acc[s] = _mm256_add_epi64(acc[s], _mm256_add_epi64(a, b));
    }
  }
  alignas(32) uint64_t lanes[4];
  __m256i total = _mm256_setzero_si256();
  for (int s = 0; s < S; ++s) total = _mm256_add_epi64(total, acc[s]);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

template <int S, bool kPrefetch>
__attribute__((target("avx512f"))) inline uint64_t read_avx512(const uint64_t* p, size_t words) {
  const size_t part = words / S;
  __m512i acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_si512();
  for (size_t i = 0; i < part; i += 8) {
    for (int s = 0; s < S; ++s) {
      const uint64_t* q = p + s * part + i;
      if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(q + 128), _MM_HINT_T0);
      acc[s] = _mm512_add_epi64(acc[s], _mm512_load_si512(q));
    }
  }
  __m512i total = _mm512_setzero_si512();
  for (int s = 0; s < S; ++s) total = _mm512_add_epi64(total, acc[s]);
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, total);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

}  // namespace detail

// Every reader's GB/s (best of 5 passes each, after one warm-up pass).
inline std::vector<ReadBandwidth> memory_read_gbps_all(ThreadPool& pool) {
  const size_t bytes = size_t{1} << 30;
  const size_t words = bytes / sizeof(uint64_t);
  const int64_t chunks = 256;
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(4096, bytes));
  pool.parallel_for(chunks, [&](int64_t c) {  // first touch in parallel
    for (size_t i = c * words / chunks; i < (c + 1) * words / chunks; ++i) buf[i] = i;
  });
  std::vector<uint64_t> sums(chunks);
  using Reader = uint64_t (*)(const uint64_t*, size_t);
  std::vector<std::pair<const char*, Reader>> readers = {
      {"sum64", detail::read_sum64},
  };
  if (__builtin_cpu_supports("avx2")) {
    readers.push_back({"avx2 x1", detail::read_avx2<1, false>});
    readers.push_back({"avx2 x4", detail::read_avx2<4, false>});
    readers.push_back({"avx2 x8", detail::read_avx2<8, false>});
    readers.push_back({"avx2 x8 +pf", detail::read_avx2<8, true>});
  }
  if (__builtin_cpu_supports("avx512f")) {
    readers.push_back({"avx512 x4", detail::read_avx512<4, false>});
    readers.push_back({"avx512 x8", detail::read_avx512<8, false>});
    readers.push_back({"avx512 x16", detail::read_avx512<16, false>});
    readers.push_back({"avx512 x8 +pf", detail::read_avx512<8, true>});
  }
  std::vector<ReadBandwidth> out;
  for (const auto& [name, reader] : readers) {
    const double t = best_time(5, [&, reader = reader] {
      pool.parallel_for(chunks, [&](int64_t c) { sums[c] = reader(buf + c * (words / chunks), words / chunks); });
    });
    out.push_back({name, bytes / t / 1e9});
  }
  volatile uint64_t sink = std::accumulate(sums.begin(), sums.end(), uint64_t{0});
  (void)sink;
  std::free(buf);
  return out;
}

// The fastest reader's GB/s (see memory_read_gbps_all).
inline double memory_read_gbps(ThreadPool& pool) {
  double best = 0.0;
  for (const ReadBandwidth& r : memory_read_gbps_all(pool)) best = std::max(best, r.gbps);
  return best;
}

}  // namespace spindle::bench
