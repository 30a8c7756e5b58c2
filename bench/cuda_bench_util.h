// Timing helpers of the CUDA product benches (bench_gemv16, bench_gemv_fp8): the median of timed
// repetitions with L2 flushed before each (as in a decode step, where the other layers' weights
// have evicted this one), and the device copy bandwidth (bytes read + written per second, the best
// of 5 copies of 2 GiB) that the benches' "% of bandwidth" columns divide by.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"

namespace spindle::bench {

namespace kcu = spindle::kernels::cuda;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of `run` with L2 flushed before each repetition.
template <typename Run>
inline double timed(Run run, kcu::DeviceBuffer& flush, int reps, cudaStream_t stream) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush.data(), i & 0xff, flush.size(), stream));
    CUDA_CHECK(cudaEventRecord(a, stream));
    run();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) t.push_back(ms * 1e-3);  // two warm-ups
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

inline double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{2} << 30;
  kcu::DeviceBuffer src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemsetAsync(src.data(), 1, bytes, stream));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) best = std::max(best, 2.0 * bytes / (ms * 1e-3));  // read + write
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}


}  // namespace spindle::bench
