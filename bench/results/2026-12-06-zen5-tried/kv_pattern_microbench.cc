#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
// K and V arrays: rows of 2 KiB (8 heads x 256 B). Tile 64 rows. Mode 0: per head over rows (strided); mode 1: rows in order (whole 2 KiB row).
static std::vector<int> perm;
inline size_t R(size_t r){ return (size_t)perm[r/16]*16 + r%16; }
double run(const char* K, const char* V, size_t rows, int mode, int pf) {
  __m512 acc = _mm512_setzero_ps();
  auto t0 = std::chrono::steady_clock::now();
  for (size_t r0 = 0; r0 < rows; r0 += 64) {
    if (pf == 1) for (size_t j = 0; j < 64*2048; j += 64) { _mm_prefetch(K + (r0+64)*2048 + j, _MM_HINT_T1); _mm_prefetch(V + (r0+64)*2048 + j, _MM_HINT_T1);}
    if (mode == 0) {
      for (int h = 0; h < 8; ++h) {
        if (pf == 2) for (size_t r = 0; r < 64; ++r) for (int b = 0; b < 256; b += 64) { _mm_prefetch(K + (r0+64+r)*2048 + h*256 + b, _MM_HINT_T0); _mm_prefetch(V + (r0+64+r)*2048 + h*256 + b, _MM_HINT_T0);}
        for (size_t r = 0; r < 64; ++r) {
          const char* k = K + R(r0 + r) * 2048 + h * 256; const char* v = V + R(r0 + r) * 2048 + h * 256;
          for (int b = 0; b < 256; b += 64) acc = _mm512_add_ps(acc, _mm512_add_ps(_mm512_loadu_ps(k + b), _mm512_loadu_ps(v + b)));
        }
      }
    } else {
      for (size_t r = 0; r < 64; ++r) {
        const char* k = K + R(r0 + r) * 2048; const char* v = V + R(r0 + r) * 2048;
        for (int b = 0; b < 2048; b += 64) acc = _mm512_add_ps(acc, _mm512_add_ps(_mm512_loadu_ps(k + b), _mm512_loadu_ps(v + b)));
      }
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = _mm512_reduce_add_ps(acc); (void)sink;
  return rows * 4096.0 / s / 1e9;
}
int main() {
  size_t rows = 65536; // 128 MiB each
  perm.resize(rows/16+8); for (size_t i=0;i<perm.size();++i) perm[i]=i; if (getenv("SHUF")) { srand(1); for (size_t i=perm.size()-1;i>0;--i){ size_t j=rand()%(i+1); std::swap(perm[i],perm[j]);} for(auto&x:perm) if(x>=(int)(rows/16)) x=0; }
  for (int th : {1, 2}) for (int mode : {0, 1}) for (int pf : {0}) {
    if (mode == 1 && pf == 2) continue;
    std::vector<double> g(th);
    std::vector<std::thread> ts;
    for (int i = 0; i < th; ++i) ts.emplace_back([&, i] {
      char* K = (char*)aligned_alloc(4096, rows * 2048 + 256*1024); char* V = (char*)aligned_alloc(4096, rows * 2048 + 256*1024);
      memset(K, 1, rows*2048); memset(V, 1, rows*2048);
      run(K, V, rows, mode, pf); g[i] = run(K, V, rows, mode, pf); free(K); free(V); });
    for (auto& t : ts) t.join();
    double tot = 0; for (double x : g) tot += x;
    printf("threads %d mode %s pf %d: %.1f GB/s\n", th, mode ? "rows" : "per-head", pf, tot);
  }
}
