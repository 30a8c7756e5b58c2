// Programmatic dependent launch (PDL): a kernel launched with launch_pdl may be started while the
// kernel before it on the stream is still running (once every block of that one has started and
// called pdl_begin, or exited), so its launch and block set-up overlap the other's tail instead of
// following it. In a CUDA graph the capture keeps this as a programmatic edge.
//
// Contract of every kernel launched with launch_pdl: pdl_begin() is its first statement, before
// any read or write of global memory, except reads of memory that no kernel of the step writes
// before it (flash decode reads the uploaded batch and the K/V of keys written by earlier steps). pdl_begin waits until
// the previous kernel on the stream has completed and its writes are visible (griddepcontrol.wait; a no-op when the
// launch did not ask for PDL or the previous work was not a kernel), then lets the next kernel launch early
// (griddepcontrol.launch_dependents). So a kernel never overlaps another's memory accesses, only
// its launch latency does; dependencies further back hold transitively.
//
// Host side: pdl.h says whether the attribute is set (sm_90+); without it
// launch_pdl is an ordinary launch. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.h"

namespace spindle::kernels::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_trigger();
}

// pdl_begin for a short, latency-bound kernel: its successor may launch at once, while this kernel
// still waits for its predecessor, so in a chain of such kernels (flash decode's split and merge,
// the f32 -> 16-bit conversion, then the output projection) each one's launch and block set-up is
// done before the one before it ends. Memory safety is unchanged: every kernel still waits before
// touching what another kernel writes, and a grid's dependents launch only once all its blocks are
// resident (or done), so waiting blocks never keep a predecessor's blocks off the SMs.
// trigger_first = false is pdl_begin.
//
// Tried and dropped (bench/results/2026-12-01-h200-checks-10, -11): the products after such a chain
// asking L2 for their whole weights before they wait. The decode step got 0.03-0.2 ms slower: the
// weight stream queued the latency-bound kernels' own reads (norm, attention) behind it. What does
// pay is smaller: gemv16's warps load only their first group of weights (2 KiB per warp, into
// registers) before they wait, -0.11 ms per batch-1 step (gemv16.cu, EarlyWeights).
__device__ __forceinline__ void pdl_begin(bool trigger_first) {
  if (trigger_first) pdl_trigger();
  pdl_wait();
  if (!trigger_first) pdl_trigger();
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...) with the PDL attribute where pdl_enabled();
// checks the launch (CUDA_CHECK).
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace spindle::kernels::cuda
