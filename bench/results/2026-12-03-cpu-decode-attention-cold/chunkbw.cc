#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
#include <numeric>
#include <algorithm>
int main(int argc, char** argv) {
  const size_t chunk = std::atoi(argv[1]);  // bytes
  const size_t total = size_t(1) << 30;
  char* buf = (char*)aligned_alloc(4096, total);
  for (size_t i = 0; i < total; i += 64) buf[i] = char(i);
  const size_t n = total / chunk;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  for (int rep = 0; rep < 3; ++rep) {
    double sums[2] = {0, 0};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int t = 0; t < 2; ++t) th.emplace_back([&, t] {
      __m512 acc = _mm512_setzero_ps();
      for (size_t i = t; i < n; i += 2) {
        const char* c = buf + order[i] * chunk;
        for (size_t b = 0; b < chunk; b += 64) acc = _mm512_add_ps(acc, _mm512_load_ps((const float*)(c + b)));
      }
      sums[t] = _mm512_reduce_add_ps(acc);
    });
    for (auto& x : th) x.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("chunk %zu: %.1f GB/s (%g)\n", chunk, total / s / 1e9, sums[0] + sums[1]);
  }
}
