// DeviceOps: the seam between the one transformer forward (transformer.h) and a device. The
// transformer owns the layer loop, the weight-name table and the architecture switches; a device
// (CpuOps, cpu_ops.h; CudaOps, cuda_ops.h) owns where weights and activations live and how each
// small op runs. Adding an architecture touches transformer.cc only; adding a device adds one
// DeviceOps.
//
// Memory: every float* an op takes or returns is in the device's memory (host memory for kCpu);
// activations are f32, row-major, contiguous. Weights are placed once at load and named by
// WeightId; an op resolves the id to its own copy or view.
//
// Order: ops run in call order on the device (the CPU runs each one to completion; CUDA queues
// them on the legacy default stream, where the attention backends run too). finish_step waits.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attn/attention_types.h"
#include "kernels/sampling_batch.h"
#include "kernels/step_batch.h"
#include "model/safetensors.h"

namespace spindle {

namespace kernels::cuda {
class DeviceBatch;
}

// A placed weight: an index into the ops' table. kNoWeight: absent (no bias, no q_norm...).
using WeightId = int32_t;
inline constexpr WeightId kNoWeight = -1;

// How a placed weight is read.
enum class WeightUse {
  kVector,  // norm weights and the embedding table, read in their stored dtype
  kLinear,  // W [out, in] of a product y = x W^T, in its stored dtype
  kBias,    // a bias vector, widened to f32
};

// The per-step activation buffers the transformer asks for (f32, grown on demand).
enum class Scratch : int {
  kHidden,     // [T, H] the residual stream
  kNormed,     // [T, H]
  kQ,          // [T, Q]
  kK,          // [T, K]
  kV,          // [T, K]
  kAttention,  // [T, Q]
  kProjection, // [T, H] o_proj and down_proj outputs
  kGateUp,     // [T, 2I]
  kActivation, // [T, I]
  kQKV,        // [T, Q + 2K] the joined q/k/v product (devices that join it)
  kFinalRows,  // [N, H]
  kLogits,     // [N, V] (devices whose logits are not written straight into host memory)
  kCount
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  virtual attn::Device device() const = 0;
  // The linear kernel of the projections ("avx512", "cublas_split", ...).
  virtual const char* linear_kernel_name() const = 0;

  // --- Weights, at load ---------------------------------------------------------------------
  // Places one weight made of `parts` (views into the mapped checkpoint, which stays mapped until
  // finish_loading). A kLinear of two parts is W = [part 0 rows; part 1 rows] (gate_proj and
  // up_proj as one [2I, H] product); a device that cannot join them returns kNoWeight, and the
  // caller places them one by one. Throws for a dtype the device cannot read, naming the tensor.
  virtual WeightId place(std::span<const TensorView> parts, WeightUse use) = 0;
  // A linear weight made of the first `rows` output rows of the placed linear weight `linear`
  // (its product computes only those outputs; a view, nothing copied), or kNoWeight where the
  // device cannot make one. May be called after finish_loading.
  virtual WeightId place_leading_rows(WeightId /*linear*/, int64_t /*rows*/) { return kNoWeight; }
  // All weights placed: the device may copy them now; the checkpoint may be unmapped after.
  virtual void finish_loading() = 0;
  // Bytes of the weights the forward reads, where they live (see each device).
  virtual uint64_t weight_bytes() const = 0;

  // --- Per step -----------------------------------------------------------------------------
  // Makes the step's batch readable on the device and returns its view there (token ids,
  // positions, logit rows in device memory). CUDA uploads it once (the returned DeviceBatch is
  // handed to the attention backend's prepare); the CPU reads the host batch (null).
  // plan_kv_len: see kernels::cuda::DeviceBatch::upload (a CUDA graph's launch plans); 0: none.
  virtual const kernels::cuda::DeviceBatch* upload(const StepBatch& batch, int page_size, int plan_kv_len) = 0;
  virtual const StepBatchView& step() const = 0;
  // Grows the scratch for a step of num_tokens rows and num_logit_rows logit rows.
  virtual void reserve(int64_t num_tokens, int64_t num_logit_rows) = 0;
  virtual float* scratch(Scratch slot) = 0;
  // Scratch, RoPE tables and library workspaces allocated now.
  virtual uint64_t workspace_bytes() const = 0;
  // Where the LM head writes logits [n, V]: `host` itself on the CPU, device scratch on CUDA.
  virtual float* logits_target(float* host) = 0;
  // Waits for the step's work; copies logits_target's n * V floats to `host` when they differ.
  virtual void finish_step(float* host, int64_t count) = 0;

  // --- Sampling on the device (CUDA) ----------------------------------------------------------
  // True where sample() chooses tokens from the step's logits in device memory, so forward may
  // leave them there.
  virtual bool samples_on_device() const { return false; }
  // The first batch.rows.size() rows of the last step's logits (kLogits) sampled; waits.
  virtual void sample(const SamplingBatch& batch, std::vector<SampledRow>& out);
  // The same in two halves, for the overlap schedule: queue_sample queues the sampling of the last
  // forward's logits without waiting (the batch may be reused on return); collect_sample waits for
  // the oldest queued one. At most two are queued at once.
  virtual void queue_sample(const SamplingBatch& batch);
  virtual void collect_sample(std::vector<SampledRow>& out);
  // After upload() and before forward(): the uploaded batch's query rows listed take their tokens
  // from the last queued sampling (device-side; nothing waits).
  virtual void take_pending_tokens(std::span<const PendingToken> tokens);

  // --- Step graphs (CUDA graphs) ---------------------------------------------------------------
  // A graph is the device work of one forward, recorded once (begin_capture, the forward's ops,
  // end_capture) and replayed for later steps of the same key (Transformer::forward's: the row
  // count, and the new tokens per sequence of a multi-token step) whose device arrays sit at the
  // same addresses. Replays are valid only while no device buffer was reallocated since the
  // capture; replay_graph returns false when there is no valid graph.
  virtual bool supports_graphs() const { return false; }
  virtual bool replay_graph(int64_t /*key*/) { return false; }
  virtual void begin_capture() {}
  // Ends the capture and keeps the graph under `key`. Returns false (and keeps nothing, the
  // device usable) when the capture failed; `why` says why.
  virtual bool end_capture(int64_t /*key*/, std::string* /*why*/) { return false; }
  // Ends a capture an exception interrupted, keeping nothing.
  virtual void abort_capture() {}
  // Destroys every graph held (their device memory goes back to the driver, which hands it to
  // the next captures: a recapture's own free-memory difference reads ~0). The counters stay,
  // memory_bytes too: it is what capturing those graphs again takes.
  virtual void release_graphs() {}
  struct GraphStats {
    int captured = 0;             // graphs held now
    int captures = 0;             // captures done (recaptures included)
    double capture_seconds = 0;   // spent capturing and instantiating
    int64_t replays = 0;
    uint64_t memory_bytes = 0;    // device memory the graphs took (free memory before - after)
  };
  virtual GraphStats graph_stats() const { return {}; }

  // --- Ops ------------------------------------------------------------------------------------
  // out[i, :] = table[ids[i], :]; ids (device memory, already checked against the vocabulary).
  virtual void embed(WeightId table, const TokenId* ids, int64_t num_ids, int64_t hidden, float* out) = 0;
  // out[r, :] = RMSNorm(x[src, :]) * w, src = row_index ? row_index[r] : r (device memory).
  virtual void rms_norm(const float* x, float* out, int64_t rows, int64_t cols, WeightId w,
                        const int64_t* row_index = nullptr) = 0;
  // hidden += delta; out = RMSNorm(hidden) * w (the residual add fused into the next norm).
  virtual void add_rms_norm(float* hidden, const float* delta, float* out, int64_t rows, int64_t cols,
                            WeightId w) = 0;
  // y += x, both [rows, cols].
  virtual void add(float* y, const float* x, int64_t rows, int64_t cols) = 0;
  // Products that read the same x [rows, in]: y_i [rows, out_i] = x W_i^T (+ bias_i).
  struct Product {
    WeightId weight = kNoWeight;
    float* y = nullptr;
    WeightId bias = kNoWeight;
  };
  virtual void linear(const float* x, int64_t rows, std::span<const Product> products) = 0;
  // The product p (y = x W^T + bias, [rows, cols]) and then add_rms_norm(hidden, p.y, out, rows,
  // cols, w): the output projections of a layer and the residual add + norm after them. Default:
  // linear then add_rms_norm; a device may do both in one pass with the same result.
  virtual void linear_add_rms_norm(const float* x, int64_t rows, const Product& p, float* hidden, float* out,
                                   int64_t cols, WeightId w);
  // Qwen3's per-head q/k RMSNorm (when q_norm and k_norm are not kNoWeight), then RoPE at
  // `positions` (device memory, [rows]): q [rows, num_heads, D], k [rows, num_kv_heads, D].
  virtual void qk_norm_rope(float* q, float* k, int64_t rows, int num_heads, int num_kv_heads, WeightId q_norm,
                            WeightId k_norm, const int64_t* positions) = 0;
  // Whether place() may join q_proj, k_proj and v_proj into one [Q + 2K, H] weight, whose product
  // split_qkv_rope then takes apart; otherwise the transformer places them one by one.
  virtual bool joins_qkv() const { return false; }
  // qkv [rows, Q + 2K] (q heads, k heads, v heads) -> q, k, v as qk_norm_rope leaves them. With a
  // non-empty kv (only where writes_kv_in_split()) it also writes each row's k and v into the
  // layer's KV pages there, as the attention backend's own write would (the caller then tells
  // the backend kv_written).
  virtual bool writes_kv_in_split() const { return false; }
  virtual void split_qkv_rope(const float* qkv, float* q, float* k, float* v, int64_t rows, int num_heads,
                              int num_kv_heads, WeightId q_norm, WeightId k_norm, const int64_t* positions,
                              const attn::KvWriteTarget& kv);
  // The joined q/k/v product into qkv [rows, Q + 2K] (scratch), then split_qkv_rope of it, with
  // the same result. Default: linear then split_qkv_rope; a device may do both in one pass.
  virtual void linear_split_qkv_rope(const float* x, int64_t rows, const Product& qkv_product, float* q, float* k,
                                     float* v, int num_heads, int num_kv_heads, WeightId q_norm, WeightId k_norm,
                                     const int64_t* positions, const attn::KvWriteTarget& kv);
  // Where the attention backend may write a 16-bit copy of its output out [rows, cols] for the
  // product after it (AttentionBackend::request_output_copy); empty where this device needs none.
  // attention_output_copied: the backend agreed and wrote it, so the next linear() over out reads it.
  virtual attn::OutputCopy attention_output_copy(const float* /*out*/, int64_t /*rows*/, int64_t /*cols*/) {
    return {};
  }
  virtual void attention_output_copied(const float* /*out*/, int64_t /*rows*/, int64_t /*cols*/,
                                       const attn::OutputCopy& /*copy*/) {}
  // out[r, i] = silu(gate[r * stride + i]) * up[r * stride + i], out [rows, cols].
  virtual void silu_mul(const float* gate, const float* up, int64_t stride, float* out, int64_t rows,
                        int64_t cols) = 0;
  // The MLP's joined [gate; up] product (weight [2 im, in]) and its activation:
  //   act [rows, im] = silu(x W_gate^T) * (x W_up^T)
  // gate_up [rows, 2 im] is scratch for the product. Default: linear into gate_up, then silu_mul
  // over its halves; a device may do both in one pass with the same result.
  virtual void linear_swiglu(const float* x, int64_t rows, WeightId gate_up_weight, float* gate_up, float* act,
                             int64_t im);
};

}  // namespace spindle
