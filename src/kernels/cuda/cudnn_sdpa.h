// cudnn_sdpa: cuDNN's fused scaled-dot-product attention (graph API, paged K/V), loaded at run
// time so a binary built with CUDA still starts where cuDNN is missing. Launch contract:
// paged_layer_launch.h. Needs cuDNN >= 9.5 (cudnn_api.h: SPINDLE_CUDNN_LIBRARY names the file).
// The graph and its plans: cudnn_sdpa_plan.h. SPINDLE_LOG_LEVEL=trace logs each graph build step,
// the engine chosen and the plan; SPINDLE_CUDNN_RAGGED=0/1 (util/switches.h) forces the padded /
// packed Q/O layout.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/paged_layer_launch.h"

namespace spindle::kernels::cuda {

// Every reason cudnn_sdpa cannot serve this shape on a device of compute capability cc_major.cc_minor
// (empty when it can): cuDNN missing or older than 9.5, compute capability, head_dim, KV dtype,
// page size (a power of 2).
std::vector<std::string> cudnn_sdpa_unsupported_reasons(int cc_major, int cc_minor, int head_dim,
                                                        detail::KvType kv_type, int page_size);

// One attention shape's cuDNN graphs, built on first use for each batch signature and cached
// (cudnn_sdpa.cc says how batches map to signatures). Owns its scratch: io-type copies of q and
// out, cuDNN's per-step inputs and workspace, grown on demand (cudaMalloc: not during CUDA graph
// capture, nor may a new signature's plan be built then). Not thread-safe; one device.
class CudnnSdpa {
 public:
  CudnnSdpa(int num_heads, int num_kv_heads, int head_dim, float scale, detail::KvType kv_type,
            int page_size);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // Runs one layer (a.workspace is not used: the object owns its scratch). Throws spindle::Error
  // with cuDNN's message when a graph cannot be built or executed.
  void run(const detail::PagedLayerLaunch& a, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spindle::kernels::cuda
