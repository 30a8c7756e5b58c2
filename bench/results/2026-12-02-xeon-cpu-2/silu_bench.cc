#include <chrono>
#include <cstdio>
#include <vector>
#include "kernels/cpu/ops.h"
using namespace spindle::kernels::cpu;
int main() {
  const int64_t rows = 512, cols = 8192;  // one 1B layer's gate/up at prefill 512
  std::vector<float> gu(rows * 2 * cols), out(rows * cols);
  for (size_t i = 0; i < gu.size(); ++i) gu[i] = float((i * 2654435761u) % 2000) / 250.0f - 4.0f;
  auto time = [&](auto fn) {
    double best = 1e9;
    for (int r = 0; r < 7; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double s = time([&] { silu_mul_scalar(gu.data(), gu.data() + cols, 2 * cols, out.data(), rows, cols); });
  const double v = time([&] { silu_mul(gu.data(), gu.data() + cols, 2 * cols, out.data(), rows, cols); });
  std::printf("silu_mul 512x8192, one thread: scalar %.2f ms, dispatched (%s) %.2f ms, %.1fx\n", s * 1e3,
              silu_mul_uses_avx2() ? "avx2" : "scalar", v * 1e3, s / v);
}
