// Shared by the benchmarks: timing and this machine's streaming read bandwidth.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdlib>
#include <immintrin.h>
#include <sys/mman.h>
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

// Best CPU time of the calling thread for fn over `reps` runs (after one warm-up run).
inline double best_cpu_time(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = thread_cpu_s();
    fn();
    best = std::min(best, thread_cpu_s() - t0);
  }
  return best;
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
//   ... +pf         and a software prefetch of each stream 1 KiB ahead (+pf2: 2 KiB ahead into L2)
// The buffer is 2 MiB aligned and advised MADV_HUGEPAGE before its first touch, as Spindle's weights
// are (util/mapped_file.cc): with transparent huge pages in "madvise" mode (this project's VMs), a
// plain allocation gets 4 KiB pages and every stream pays a TLB miss per 4 KiB, which the weights
// never do. The readers marked "4k" read a buffer of ordinary pages, for comparison.
// A decode step that reads its weights once is bounded by the fastest: a kernel that beats the
// probe means the probe, not the kernel, is wrong.
//
// cpu_gbps: the same bytes over the readers' own CPU time (the tasks' thread CPU time summed, over
// the number of threads): what the readers achieve while they run, robust to other processes
// taking turns on the cores (not to their use of the memory bus). On a loaded machine compare a
// decode's CPU-time rate with this figure, not wall-time rates.
struct ReadBandwidth {
  const char* reader;
  double gbps;
  double cpu_gbps = 0;
};

namespace detail {

inline uint64_t read_sum64(const uint64_t* p, size_t words) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < words; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  return s0 + s1 + s2 + s3;
}

// kPrefetch: 0 none, 1 1 KiB ahead into L1, 2 2 KiB ahead into L2.
template <int S, int kPrefetch>
__attribute__((target("avx2"))) inline uint64_t read_avx2(const uint64_t* p, size_t words) {
  const size_t part = words / S;  // words per stream (a multiple of 8: one 64-byte line)
  __m256i acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm256_setzero_si256();
  for (size_t i = 0; i < part; i += 8) {
    for (int s = 0; s < S; ++s) {
      const uint64_t* q = p + s * part + i;
      if constexpr (kPrefetch == 1) _mm_prefetch(reinterpret_cast<const char*>(q + 128), _MM_HINT_T0);
      if constexpr (kPrefetch == 2) _mm_prefetch(reinterpret_cast<const char*>(q + 256), _MM_HINT_T1);
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

template <int S, int kPrefetch>
__attribute__((target("avx512f"))) inline uint64_t read_avx512(const uint64_t* p, size_t words) {
  const size_t part = words / S;
  __m512i acc[S];
  for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_si512();
  for (size_t i = 0; i < part; i += 8) {
    for (int s = 0; s < S; ++s) {
      const uint64_t* q = p + s * part + i;
      if constexpr (kPrefetch == 1) _mm_prefetch(reinterpret_cast<const char*>(q + 128), _MM_HINT_T0);
      if constexpr (kPrefetch == 2) _mm_prefetch(reinterpret_cast<const char*>(q + 256), _MM_HINT_T1);
      acc[s] = _mm512_add_epi64(acc[s], _mm512_load_si512(q));
    }
  }
  __m512i total = _mm512_setzero_si512();
  for (int s = 0; s < S; ++s) total = _mm512_add_epi64(total, acc[s]);
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, total);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

// `bytes` of memory, 2 MiB aligned; advised MADV_HUGEPAGE when `huge`; first touched in parallel.
inline uint64_t* probe_buffer(size_t bytes, bool huge, ThreadPool& pool, int64_t chunks) {
  constexpr size_t kHuge = size_t{2} << 20;
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(kHuge, bytes));
  if (huge) (void)::madvise(buf, bytes, MADV_HUGEPAGE);
  const size_t words = bytes / sizeof(uint64_t);
  pool.parallel_for(chunks, [&](int64_t c) {
    for (size_t i = c * words / chunks; i < (c + 1) * words / chunks; ++i) buf[i] = i;
  });
  return buf;
}

using Reader = uint64_t (*)(const uint64_t*, size_t);
struct NamedReader {
  const char* name;
  const char* name_4k;  // also run on 4 KiB pages under this name (null: not)
  Reader fn;
};

inline std::vector<NamedReader> readers() {
  std::vector<NamedReader> r = {{"sum64", "sum64 4k", read_sum64}};
  if (__builtin_cpu_supports("avx2")) {
    r.push_back({"avx2 x1", nullptr, read_avx2<1, 0>});
    r.push_back({"avx2 x4", "avx2 x4 4k", read_avx2<4, 0>});
    r.push_back({"avx2 x8", nullptr, read_avx2<8, 0>});
    r.push_back({"avx2 x8 +pf", nullptr, read_avx2<8, 1>});
    r.push_back({"avx2 x8 +pf2", nullptr, read_avx2<8, 2>});
  }
  if (__builtin_cpu_supports("avx512f")) {
    r.push_back({"avx512 x4", nullptr, read_avx512<4, 0>});
    r.push_back({"avx512 x8", "avx512 x8 4k", read_avx512<8, 0>});
    r.push_back({"avx512 x16", nullptr, read_avx512<16, 0>});
    r.push_back({"avx512 x8 +pf", nullptr, read_avx512<8, 1>});
    r.push_back({"avx512 x16 +pf2", nullptr, read_avx512<16, 2>});
  }
  return r;
}

}  // namespace detail

// Every reader's GB/s (best of 5 passes each, after one warm-up pass): all of them on the
// huge-page buffer, then sum64 and the first AVX2 x4 / AVX-512 x8 reader on 4 KiB pages ("4k").
inline std::vector<ReadBandwidth> memory_read_gbps_all(ThreadPool& pool) {
  const size_t bytes = size_t{1} << 30;
  const size_t words = bytes / sizeof(uint64_t);
  const int64_t chunks = 256;
  std::vector<uint64_t> sums(chunks);
  std::vector<double> cpu(chunks);
  std::vector<ReadBandwidth> out;
  const auto measure = [&](const char* name, detail::Reader reader, const uint64_t* buf) {
    double best_cpu = 1e30;
    const double t = best_time(5, [&] {
      pool.parallel_for(chunks, [&](int64_t c) {
        const double c0 = thread_cpu_s();
        sums[c] = reader(buf + c * (words / chunks), words / chunks);
        cpu[c] = thread_cpu_s() - c0;
      });
      best_cpu = std::min(best_cpu, std::accumulate(cpu.begin(), cpu.end(), 0.0));
    });
    out.push_back({name, bytes / t / 1e9, bytes / (best_cpu / pool.num_threads()) / 1e9});
  };
  for (const bool huge : {true, false}) {
    uint64_t* buf = detail::probe_buffer(bytes, huge, pool, chunks);
    for (const detail::NamedReader& r : detail::readers()) {
      if (huge) measure(r.name, r.fn, buf);
      else if (r.name_4k != nullptr) measure(r.name_4k, r.fn, buf);
    }
    std::free(buf);
  }
  volatile uint64_t sink = std::accumulate(sums.begin(), sums.end(), uint64_t{0});
  (void)sink;
  return out;
}

// The fastest reader's GB/s (see memory_read_gbps_all).
inline double memory_read_gbps(ThreadPool& pool) {
  double best = 0.0;
  for (const ReadBandwidth& r : memory_read_gbps_all(pool)) best = std::max(best, r.gbps);
  return best;
}

}  // namespace spindle::bench
