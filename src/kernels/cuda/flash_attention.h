// cuda_flash: paged attention on tensor cores. Launch contract: paged_layer_launch.h.
//
// Prefill (flash_prefill.cu): FlashAttention-2 style. Each block owns a tile of query rows of one
//   sequence and one head, keeps Q in registers, streams K/V tiles of the sequence's pages through
//   shared memory (cp.async), computes S = Q K^T and O += P V with mma.sync (bf16 or fp16 inputs,
//   f32 accumulation) and an online softmax. Handles any batch: ragged lengths, cached prefixes,
//   causal or not, GQA, decode rows mixed in.
// Decode (flash_decode.cu): split-KV (flash-decoding) for steps where every sequence has exactly
//   one new token: the keys of each (sequence, KV head) are split into chunks processed by
//   separate blocks (each serving all the query heads of its GQA group, so K/V are read once),
//   then the chunks' partial softmax results are merged by a second kernel. Memory-bound by
//   design.
//   cuda_flash also runs causal steps of 2..kRowSequencesMaxRows query rows (a batch-1
//   speculative verify) on it, each query row as a one-token sequence over its causal prefix
//   (PagedBatchView::row_sequences).
//
// q is f32 and is rounded to the KV type (bf16/fp16) for the tensor-core products, as are the
// probabilities P; accumulation is f32 throughout (validation tolerance: attn/validation.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/paged_layer_launch.h"

namespace spindle::kernels::cuda::detail {

// Whether the kernels are built for this head_dim and KV type (bf16 or fp16 KV; f32 KV is not).
bool flash_prefill_supports(int head_dim, KvType kv_type);
bool flash_decode_supports(int head_dim, KvType kv_type);

// Device scratch each launch needs in a.workspace (0 when none).
size_t flash_prefill_workspace_bytes(const PagedLayerLaunch& a);
size_t flash_decode_workspace_bytes(const PagedLayerLaunch& a);

// Both check the launch error (CUDA_CHECK_LAUNCH). launch_flash_decode requires
// a.batch.max_new_tokens == 1.
void launch_flash_prefill(const PagedLayerLaunch& a, cudaStream_t stream);
void launch_flash_decode(const PagedLayerLaunch& a, cudaStream_t stream);

}  // namespace spindle::kernels::cuda::detail
