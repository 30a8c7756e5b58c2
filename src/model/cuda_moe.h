// The CUDA device's state for LayerMath::moe (CudaOps::moe, cuda_moe.cc): per sparse layer the
// device table of its experts' weights, and the step's scratch. Built only with SPINDLE_WITH_CUDA.
//
// One step's MoE block, per chunk of at most kCudaMoeChunkRows rows (kernels/cuda/moe_kernels.h):
// route (router product + top-k) -> group by expert -> grouped gate/up + SiLU-mul -> grouped
// down -> (Qwen2-MoE: the shared expert's products through the dense linear path, and its gate)
// -> weighted sum into y. No host sync and no host-side count: decode and verify steps replay the
// same launches from a CUDA graph whatever their routing. Prefill (eager) runs the same kernels.
#pragma once

#include <cstdint>
#include <map>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/model_ops.h"
#include "model/device_ops.h"
#include "model/model_config.h"
#include "model/weight_view.h"

namespace spindle {

// Rows of a step's MoE block computed together. 1024 rows of Qwen3-30B-A3B (top 8, hidden 2048,
// width 768) hold 64 MiB of expert outputs and 24 MiB of activations; a decode or verify step is
// one chunk.
inline constexpr int64_t kCudaMoeChunkRows = 1024;

// One sparse layer's experts on the device.
struct CudaMoeExperts {
  // [3E] device pointers: gate rows [F, H] of expert e at e, its up rows [F, H] at E + e, its
  // down [H, F] at 2E + e (a joined gate/up weight: its first F rows, then the next F).
  kernels::cuda::DeviceBuffer pointers;
  kernels::cuda::WeightType type = kernels::cuda::WeightType::kBF16;
  bool aligned16 = false;  // every expert weight 16-byte aligned (the vector kernels)
};

struct CudaMoeScratch {
  // R = rows of one chunk, k = top_k, E experts, F expert width, S shared width, H hidden.
  kernels::cuda::DeviceBuffer logits;          // [min(R, kMoeRouteSpreadMaxRows), E] f32 router logits
  kernels::cuda::DeviceBuffer experts;         // [R k] int32
  kernels::cuda::DeviceBuffer weights;         // [R k] f32
  kernels::cuda::DeviceBuffer offsets;         // [E + 1] int32
  kernels::cuda::DeviceBuffer order;           // [R k] int32
  kernels::cuda::DeviceBuffer active;          // [E + 1] int32
  kernels::cuda::DeviceBuffer act;             // [R k, F] f32, by grouped position
  kernels::cuda::DeviceBuffer out;             // [R k, H] f32, by choice
  kernels::cuda::DeviceBuffer shared_gate_up;  // [R, 2S]
  kernels::cuda::DeviceBuffer shared_act;      // [R, S]
  kernels::cuda::DeviceBuffer shared_out;      // [R, H]
  kernels::cuda::DeviceBuffer shared_gate;     // [R]
  // The small-step path's ticket counters (kernels/cuda/moe_kernels.h, moe_fused_supported): [1]
  // for route_group, then [ceil(H / kMoeDownCombineTile)] for down_combine; zero when allocated,
  // left zero by every launch.
  kernels::cuda::DeviceBuffer counters;
  int64_t rows = 0;                            // R reserved

  // Grows every buffer for a step of `rows` rows (at most kCudaMoeChunkRows count).
  void reserve(const ModelConfig& config, int64_t rows);
  uint64_t bytes() const;
};

struct CudaMoeState {
  CudaMoeScratch scratch;
  std::map<WeightId, CudaMoeExperts> experts;  // by the layer's router weight
};

// Refuses (naming the tensor, its type and the file) a mixture of experts whose router or expert
// weights the CUDA path cannot compute: anything but F32, F16 and BF16 (GGUF blocks, FP8).
void check_cuda_moe_weights(const ModelConfig& config, WeightSource& weights);

}  // namespace spindle
