// Flash decode's split sizes: the registry's values that the split plan reads
// (util/switches.h: flash_decode_min_chunk, flash_decode_blocks_per_sm; once the A/B switches
// SPINDLE_FLASH_DECODE_MIN_CHUNK / _BLOCKS_PER_SM), and the start-time measurement that chooses
// them on this GPU (cuda_flash's BackendDescriptor::measure_machine; serve and generate run it). A C++17 header for the .cu files; split_policy.cc reads switches() on every call (a plan
// is made per launch; graph replays make none).
#pragma once

#include <vector>

#include "kernels/cuda/paged_layer_launch.h"

namespace spindle::kernels::cuda {

int flash_decode_min_chunk_keys();    // keys; flash_decode.cu falls back to 64 outside [16, 1024] / 16
int flash_decode_blocks_per_sm();     // [1, 64]

struct SplitSizes {
  int min_chunk_keys;
  int blocks_per_sm;
};
// The candidates timed, the registry's defaults first (measured on the H200: 64 keys, 1 block per
// SM; bench/results/2026-12-03-h200-decode-splits-s14 found no faster one there).
inline constexpr SplitSizes kSplitCandidates[] = {{64, 1}, {64, 2}, {128, 1}, {128, 2}, {256, 1}};

// The two decode steps timed: batch 1 over 512 keys (the lightly loaded server's step, where the
// launch and merge latency decide) and batch 8 over 2048 keys (a loaded one, KV read bound).
struct SplitStep {
  int batch;
  int kv_len;
};
inline constexpr SplitStep kSplitSteps[] = {{1, 512}, {8, 2048}};

struct SplitMeasurement {
  SplitSizes best{64, 1};
  // us[c][s]: median microseconds of one launch_flash_decode of kSplitSteps[s] with kSplitCandidates[c].
  std::vector<std::vector<double>> us;
};

// Times launch_flash_decode on the current device for the attention shape given (KV bf16 or f16,
// page size 16, zero K/V and q: the timing does not depend on the values) with every candidate,
// `rounds` rounds alternating the candidates, `launches` back-to-back launches timed per round
// (cudaEvent), the median round per (candidate, step). best: the candidate whose time relative
// to the defaults', summed over both steps, is the smallest, where that is more than 2% below
// the defaults' (else the defaults: noise moves nothing). Sets the
// registry's values while it times a candidate and restores them after. Allocates and frees its
// own buffers (about 2 * 8 * 2048 * num_kv_heads * head_dim * 2 bytes of KV); throws
// spindle::Error on a CUDA error or an unsupported shape.
SplitMeasurement measure_flash_decode_splits(int num_heads, int num_kv_heads, int head_dim, detail::KvType kv_type,
                                             int rounds = 5, int launches = 20);

}  // namespace spindle::kernels::cuda
