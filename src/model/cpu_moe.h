// The CPU's scratch for LayerMath::moe (CpuOps::moe, cpu_moe.cc): one chunk of at most
// kMoeChunkRows rows at a time, so the gathered copies stay bounded (top_k copies of each row).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/moe_routing.h"
#include "model/model_config.h"

namespace spindle {

// Rows of a step's MoE block computed together: each active expert's weights are read once per
// chunk. 512 rows x top_k 8 keep Qwen3-30B-A3B's gathered rows, expert activations and outputs
// near 100 MiB; a decode or verify step is one chunk.
inline constexpr int64_t kMoeChunkRows = 512;

struct CpuMoeScratch {
  // R = rows of one chunk, k = top_k, E experts, F expert width, S shared width, H hidden.
  std::vector<float> logits;          // [R, E] router logits
  std::vector<int32_t> experts;       // [R, k] chosen experts
  std::vector<float> weights;         // [R, k] their routing weights
  std::vector<float> gathered;        // [R k, H] the rows, grouped by expert
  std::vector<float> gate_up;         // [R k, 2F]
  std::vector<float> act;             // [R k, F]
  std::vector<float> out;             // [R k, H] each expert's output rows, grouped as `gathered`
  std::vector<float> shared_gate_up;  // [R, 2S]
  std::vector<float> shared_act;      // [R, S]
  std::vector<float> shared_out;      // [R, H]
  std::vector<float> shared_gate;     // [R]
  kernels::cpu::ExpertGroups groups;

  // Grows every buffer for a step of `rows` rows (at most kMoeChunkRows count) of config's MoE.
  void reserve(const ModelConfig& config, int64_t rows);
  uint64_t bytes() const;
};

}  // namespace spindle
