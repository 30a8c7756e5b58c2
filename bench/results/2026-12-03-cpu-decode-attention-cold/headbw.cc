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
  const int mode = std::atoi(argv[1]);  // 0: head-strided; 1: sequential within the 4 pages; 2: head-strided + prefetch next group
  const size_t chunk = 16384, total = size_t(1) << 30, n = total / chunk;
  char* buf = (char*)aligned_alloc(4096, total);
  for (size_t i = 0; i < total; i += 64) buf[i] = char(i);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  for (int rep = 0; rep < 3; ++rep) {
    double sums[2] = {0, 0};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int t = 0; t < 2; ++t) th.emplace_back([&, t] {
      __m512 acc = _mm512_setzero_ps();
      for (size_t g = 4 * t; g + 4 <= n; g += 8) {
        const char* c[4];
        for (int i = 0; i < 4; ++i) c[i] = buf + order[g + i] * chunk;
        if (mode == 2 && g + 12 <= n) for (int i = 0; i < 4; ++i) { const char* d = buf + order[g + 8 + i] * chunk; for (int b = 0; b < 16384; b += 64) _mm_prefetch(d + b, _MM_HINT_T0); }
        if (mode == 1) { for (int i = 0; i < 4; ++i) for (int b = 0; b < 16384; b += 64) acc = _mm512_add_ps(acc, _mm512_load_ps((const float*)(c[i] + b))); }
        else for (int h = 0; h < 8; ++h) for (int key = 0; key < 64; ++key) { const char* r = c[key / 16] + (key % 16) * 1024 + h * 128; acc = _mm512_add_ps(acc, _mm512_add_ps(_mm512_load_ps((const float*)r), _mm512_load_ps((const float*)(r + 64)))); }
      }
      sums[t] = _mm512_reduce_add_ps(acc);
    });
    for (auto& x : th) x.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("mode %d: %.1f GB/s (%g)\n", mode, total / s / 1e9, sums[0] + sums[1]);
  }
}
