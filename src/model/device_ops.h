// DeviceOps: the seam between the one transformer forward (transformer.h) and a device, in three
// roles: WeightStore (weights, at load), StepContext (the step's batch, scratch and logits,
// sampling on the device, step graphs) and LayerMath (the forward's ops). The transformer owns
// the layer loop, the weight-name table and the architecture switches; a device (CpuOps,
// cpu_ops.h; CudaOps, cuda_ops.h) owns where weights and activations live, how each op runs and
// which ops it fuses: the transformer never asks what a device can do (a device that joins the
// q/k/v products, writes the new K/V in its RoPE pass or records graphs does so behind these
// entries). Adding an architecture touches transformer.cc only; adding a device adds one
// DeviceOps.
//
// Memory: every float* an op takes or returns is in the device's memory (host memory for kCpu);
// activations are f32, row-major, contiguous. Weights are placed once at load and named by
// WeightId (or LinearGroup); an op resolves the id to its own copy or view.
//
// Order: ops run in call order on the device (the CPU runs each one to completion; CUDA queues
// them on the legacy default stream, where the attention backends run too). finish_step waits.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/attention_types.h"
#include "kernels/sampling_batch.h"
#include "kernels/step_batch.h"
#include "model/weight_view.h"

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

// Linear weights that read the same input, placed as the device chooses: joined into one
// product of their stacked rows (`joined`, its bias `joined_bias`) or one by one (`parts`,
// `biases`, in the order given; the rest kNoWeight). The LayerMath entry that takes the group
// (attention_input, swiglu) runs it either way with the same result.
enum class LinearGroupKind {
  kQkv,     // q_proj, k_proj, v_proj: [Q, H], [K, H], [K, H] (and their biases)
  kGateUp,  // gate_proj, up_proj: [I, H] each, no bias
};
struct LinearGroup {
  WeightId joined = kNoWeight;
  WeightId joined_bias = kNoWeight;
  std::array<WeightId, 3> parts{kNoWeight, kNoWeight, kNoWeight};
  std::array<WeightId, 3> biases{kNoWeight, kNoWeight, kNoWeight};
};

// The placed weights and shape of one sparse (mixture-of-experts) layer's MLP (MoeConfig in
// model_config.h): E experts of width F, each a kGateUp group (gate [F, H], up [F, H]; joined
// where the device joins them, e.g. a fused 3-D checkpoint's [2F, H] slice) and a down [H, F];
// the router [E, H] and, for Qwen2-MoE, a shared expert of width S and its gate [1, H].
struct MoeBlock {
  int num_experts = 0;
  int top_k = 0;
  bool norm_topk_prob = false;
  int64_t expert_width = 0;  // F
  int64_t shared_width = 0;  // S; 0: no shared expert
  WeightId router = kNoWeight;         // kLinear [E, H]
  std::vector<LinearGroup> gate_up;    // [E]
  std::vector<WeightId> down;          // [E], kLinear [H, F]
  LinearGroup shared_gate_up;          // S > 0
  WeightId shared_down = kNoWeight;    // kLinear [H, S]
  WeightId shared_gate = kNoWeight;    // kLinear [1, H]
};

struct MoeConfig;
// Throws naming both counts when `block` is not a block of `moe`: its expert count and top-k, one
// gate/up group and one down weight per expert.
void check_moe_block(const MoeBlock& block, const MoeConfig& moe);

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

// Role 1: where the weights live.
class WeightStore {
 public:
  virtual ~WeightStore() = default;

  // The linear kernel of the projections ("avx512", "cublas_split", ...).
  virtual const char* linear_kernel_name() const = 0;
  // Places one weight made of `parts` (views into the checkpoint, which stays valid until
  // finish_loading; a part's release() may be called once the device no longer reads its bytes).
  // A kLinear of several parts is W = [part 0 rows; part 1 rows; ...] (one product); a device that
  // cannot join them returns kNoWeight. Throws for a type the device cannot compute, naming it,
  // the tensor and the file (WeightView::where).
  virtual WeightId place(std::span<const WeightView> parts, WeightUse use) = 0;
  // The linear weights of a LinearGroup (weights, and biases: empty or one per weight), joined
  // or one by one as this device runs them best. Places in the order: the joined weight and its
  // bias; or every part, then every bias.
  virtual LinearGroup place_group(LinearGroupKind kind, std::span<const WeightView> weights,
                                  std::span<const WeightView> biases) = 0;
  // A linear weight made of the first `rows` output rows of the placed linear weight `linear`
  // (its product computes only those outputs; a view, nothing copied), or kNoWeight where the
  // device cannot make one. May be called after finish_loading.
  virtual WeightId place_leading_rows(WeightId /*linear*/, int64_t /*rows*/) { return kNoWeight; }
  // All weights placed: the device may copy them now; the checkpoint may be unmapped after.
  virtual void finish_loading() = 0;
  // Bytes of the weights the forward reads, where they live (see each device).
  virtual uint64_t weight_bytes() const = 0;

 protected:
  // place_group's one-by-one placement (the parts, then the biases), for every device.
  LinearGroup place_each(std::span<const WeightView> weights, std::span<const WeightView> biases);
  // place_group's joined placement: kNoWeight in `joined` where place() cannot join the parts.
  LinearGroup place_joined(std::span<const WeightView> weights, std::span<const WeightView> biases);
};

// Role 2: one step's batch, scratch and logits on the device; sampling there; step graphs.
class StepContext {
 public:
  virtual ~StepContext() = default;

  virtual attn::Device device() const = 0;

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
  // Throws for a null `host` where the device cannot keep the logits (!samples_on_device()).
  virtual float* logits_target(float* host) = 0;
  // Waits for the step's work; copies logits_target's n * V floats to `host` when they differ.
  virtual void finish_step(float* host, int64_t count) = 0;
  // After finish_step: the first `count` floats of kFinalRows (the final RMSNorm of the logit
  // rows, [n, H], what the LM head read) copied to `host` (embeddings).
  virtual void read_final_rows(float* host, int64_t count) = 0;

  // --- Sampling on the device (CUDA) --------------------------------------------------------
  // True where sampling chooses tokens from the step's logits in device memory, so forward may
  // leave them there.
  virtual bool samples_on_device() const { return false; }
  // The first batch.rows.size() rows of the last step's logits (kLogits) sampled; waits.
  void sample(const SamplingBatch& batch, std::vector<SampledRow>& out) {
    queue_sample(batch);
    collect_sample(out);
  }
  // The same in two halves, for the overlap schedule: queue_sample queues the sampling of the last
  // forward's logits without waiting (the batch may be reused on return); collect_sample waits for
  // the oldest queued one. At most two are queued at once.
  virtual void queue_sample(const SamplingBatch& batch);
  virtual void collect_sample(std::vector<SampledRow>& out);
  // After upload() and before forward(): the uploaded batch's query rows listed take their tokens
  // from the last queued sampling (device-side; nothing waits).
  virtual void take_pending_tokens(std::span<const PendingToken> tokens);

  // --- Step graphs (CUDA graphs) -------------------------------------------------------------
  // A graph is the device work of one forward, recorded once and replayed for later steps of the
  // same key (Transformer::forward's: the row count, and the new tokens per sequence of a
  // multi-token step) whose device arrays sit at the same addresses. Replays are valid only
  // while no device buffer was reallocated since the capture.
  virtual bool supports_graphs() const { return false; }
  // Queues the device work of one forward, which `work` queues op by op. graph_key < 0: work()
  // once. Otherwise (only where supports_graphs()): the graph kept under graph_key replayed when
  // one is valid; else work() runs, and a second work() is recorded and kept under graph_key for
  // the next step. A failed recording (work threw, or the capture failed) keeps nothing, leaves
  // the device usable and says why in `capture_failure`; a kept one clears it.
  virtual void run_forward(int64_t graph_key, const std::function<void()>& work, std::string& capture_failure);
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
};

// Role 3: the forward's ops. The fused entries (linear_add_rms_norm, attention_input, attend,
// swiglu) have defaults made of the plain ones; a device overrides them to fuse, with the same
// result.
class LayerMath {
 public:
  virtual ~LayerMath() = default;

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
  // Qwen3's per-head q/k RMSNorm (when q_norm and k_norm are not kNoWeight), then RoPE at
  // `positions` (device memory, [rows]): q [rows, num_heads, D], k [rows, num_kv_heads, D].
  virtual void qk_norm_rope(float* q, float* k, int64_t rows, int num_heads, int num_kv_heads, WeightId q_norm,
                            WeightId k_norm, const int64_t* positions) = 0;
  // out[r, i] = silu(gate[r * stride + i]) * up[r * stride + i], out [rows, cols].
  virtual void silu_mul(const float* gate, const float* up, int64_t stride, float* out, int64_t rows,
                        int64_t cols) = 0;

  // The product p (y = x W^T + bias, [rows, cols]) and then add_rms_norm(hidden, p.y, out, rows,
  // cols, w): the output projections of a layer and the residual add + norm after them. Default:
  // linear then add_rms_norm.
  virtual void linear_add_rms_norm(const float* x, int64_t rows, const Product& p, float* hidden, float* out,
                                   int64_t cols, WeightId w);
  // The attention block's input from x [rows, H] (the input norm's output):
  //   q, k, v = x W_q^T (+b), x W_k^T (+b), x W_v^T (+b)   (the kQkv group `qkv`)
  //   Qwen3: q, k = RMSNorm per head (q_norm, k_norm not kNoWeight); q, k = RoPE at `positions`
  // into q [rows, num_heads * D], k and v [rows, num_kv_heads * D]. A device may also write k and
  // v into `attention`'s KV pages of `layer` (AttentionBackend::kv_write_target) and return true:
  // then attend() is told kv_written. Default: the group's products, then qk_norm_rope; false.
  struct AttentionInput {
    const float* x = nullptr;
    int64_t rows = 0;
    const LinearGroup* qkv = nullptr;
    WeightId q_norm = kNoWeight, k_norm = kNoWeight;
    const int64_t* positions = nullptr;  // [rows], device memory
    int num_heads = 0, num_kv_heads = 0;
    float* q = nullptr;
    float* k = nullptr;
    float* v = nullptr;
  };
  virtual bool attention_input(const AttentionInput& in, attn::AttentionBackend& attention, int layer);
  // attention.forward(layer, q, k, v, out, kv_written). A device may also have the backend
  // write a 16-bit copy of out for the product that reads it next
  // (AttentionBackend::request_output_copy). Default: the forward alone.
  virtual void attend(attn::AttentionBackend& attention, int layer, attn::ConstTensor q, attn::ConstTensor k,
                      attn::ConstTensor v, attn::Tensor out, bool kv_written);
  // The MLP's activation from x [rows, in] and the kGateUp group:
  //   act [rows, im] = silu(x W_gate^T) * (x W_up^T)
  // gate_up [rows, 2 im] is scratch for the products. Default: the joined product into gate_up
  // and silu_mul over its halves; or the two products into gate_up's halves ([gate rows; up
  // rows]) and silu_mul of them.
  virtual void swiglu(const float* x, int64_t rows, const LinearGroup& gate_up, float* gate_up_scratch, float* act,
                      int64_t im);
  // A sparse layer's MLP: y [rows, H] from x [rows, H] (the post-attention norm's output):
  //   logits = x W_router^T (f32 accumulation); per row the top_k experts and weights w as
  //   kernels/cpu/moe_routing.h defines them; y[r] = sum_j w_rj * expert_(e_rj)(x[r])
  //   (+ sigmoid(x[r] . w_shared_gate) * shared_expert(x[r]) when shared_width > 0)
  // with expert(x) = (silu(x W_gate^T) * (x W_up^T)) W_down^T. Default: refused (a device that
  // serves mixtures of experts overrides it; CpuOps in cpu_moe.cc).
  virtual void moe(const float* x, int64_t rows, const MoeBlock& block, float* y);
};

// One device's three roles, owned together by the Transformer.
class DeviceOps : public WeightStore, public StepContext, public LayerMath {};

}  // namespace spindle
