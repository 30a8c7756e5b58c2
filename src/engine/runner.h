// Runner: turns the scheduler's plan into ONE StepBatch (kernels/step_batch.h) and runs it: the
// batch is checked and uploaded once, the attention backend of the step's phase is prepared
// with it (decode when every sequence has at most one new token, else prefill: decided here
// only, from StepBatch::is_decode), then the transformer runs every layer. The runner, not the
// model, owns the choice of backend and calls prepare.
//
// Where the model samples on its device (CUDA), run_and_sample() keeps the logits there and
// returns only the chosen tokens. Where it has step graphs and they are enabled, a decode step
// of at most max_graph_batch sequences is padded (StepBatch::add_padding_sequence) up to the
// next graph batch size (graph_batch_size) and replayed from the graph of that size: captured at
// start by capture_graphs(), or else the first time the size is seen, and again when a buffer it
// reads has moved (DeviceOps: graphs). A speculative verify step is replayed from a graph too
// when it is uniform (is_uniform_verify: every sequence verifies the same number of drafts) and
// has at most kMaxVerifyGraphSequences sequences: one graph per (sequences, tokens each),
// captured the first time that shape is seen (not padded, not captured at start).
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <deque>
#include <span>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "engine/scheduler.h"
#include "kernels/sampling_batch.h"
#include "kernels/step_batch.h"
#include "model/transformer.h"

namespace spindle::engine {

struct RunnerOptions {
  // Decode steps of at most this many sequences replay step graphs (0: never). Only where the
  // model supports_graphs().
  int max_graph_batch = 0;
  // The longest context a graph step may see (--max-model-len): the attention's launch plans of
  // a graph are made for it.
  int max_model_len = 0;
  // Uniform verify steps replay graphs too (where decode steps do); false: they run eagerly
  // (bench_spec_verify --eager-verify, for A/B runs).
  bool verify_graphs = true;
  // A model that samples on the host (the CPU): launch() samples its host logits by the device
  // sampler's contract (kernels/sampling_batch.h; sample_rows_on_host), so the device-sampling step
  // and the overlap schedule run without a device (tests). Off: the engine samples such a model's
  // logits itself (engine::Sampler), as serving on the CPU does.
  bool sample_on_host = false;
};

// The graph batch size a decode step of n sequences is padded to: 1, 2, 4, 8, then multiples of 8.
int graph_batch_size(int n);

// Verify steps of at most this many sequences, each of at most kMaxVerifyGraphTokens new tokens,
// replay graphs (speculation is for small batches; this bounds the lazily captured graphs, whose
// memory comes from the KV plan's reserve, to 8 x 15 shapes).
inline constexpr int kMaxVerifyGraphSequences = 8;
inline constexpr int kMaxVerifyGraphTokens = 16;
// Whether every sequence of `batch` has the same n >= 2 new tokens on top of a cached context,
// all n of them with logits (a verify step of n - 1 drafts each), and nothing else is in it.
bool is_uniform_verify(const StepBatch& batch);

// A launched step's rows copied to the host right after its forward and before its sampling
// (prompt logprobs and embeddings where the runner samples on the device; the CPU's host path
// reads them from run()'s logits and final_rows()). Asked for with the want_ flags; launch()
// fills the vectors (emptied when not asked for):
//   logits      [num_logit_rows, vocab_size] f32, every logit row of the step (padding rows too)
//   final_rows  [num_logit_rows, hidden_size] f32, the final RMSNorm the LM head read
struct HostRows {
  bool want_logits = false;
  bool want_final_rows = false;
  std::vector<float> logits;
  std::vector<float> final_rows;
  bool wanted() const { return want_logits || want_final_rows; }
};

class Runner {
 public:
  // Borrows the model and the backends (both running on the model's device; may be the same).
  Runner(Transformer& model, attn::AttentionBackend& prefill, attn::AttentionBackend& decode,
         RunnerOptions options = {});

  Transformer& model() { return model_; }
  // One cache per layer on the model's device, handed to both backends.
  void bind_kv_caches(std::span<const attn::LayerKvCache> caches);

  // The step's batch from the plan: every scheduled sequence's new tokens (from its request's
  // prompt + output, then its draft tokens), cached length, page table, and its logit rows when
  // its context completes (1 + its draft tokens: ScheduledSequence::num_logit_rows).
  // Valid until the next build().
  const StepBatch& build(const StepPlan& plan);
  // Runs one step over `batch` (build()'s, or any StepBatch a test or probe made) and returns
  // host logits [batch.num_logit_rows(), vocab_size] (the sampler may modify them), valid until
  // the next run(). Always eager.
  std::span<float> run(const StepBatch& batch);
  // After run(batch): the final RMSNorm of its logit rows, [batch.num_logit_rows(), hidden_size]
  // (the hidden states the LM head read), valid until the next call.
  std::span<const float> final_rows(const StepBatch& batch);

  // Where the runner samples (the model's device, or the host with sample_on_host): runs build()'s
  // batch (graphs where enabled) and samples its logit rows, sampling.rows[r] for logit row r (as
  // many rows as the batch has logit rows). Valid until the next call. = launch() then collect().
  bool samples_on_device() const { return model_.samples_on_device() || options_.sample_on_host; }
  const std::vector<SampledRow>& run_and_sample(const SamplingBatch& sampling);
  // run_and_sample in two halves (the overlap schedule, step_executor.h): launch() queues build()'s batch
  // and the sampling of its logit rows without waiting for the device; the batch's pending tokens
  // (Request::num_pending_tokens: built as PendingToken, pending_tokens()) are taken on the device
  // from the last launched step's samples. collect() waits for the oldest launched step and returns
  // its rows (valid until the next collect). At most two steps are launched and not collected.
  // host_rows (optional): the step's rows it asks for, copied before the sampling is queued (the
  // copy waits for the forward; sampling rows of those logit rows may be any, their tokens unread).
  void launch(const SamplingBatch& sampling, HostRows* host_rows = nullptr);
  const std::vector<SampledRow>& collect();
  int num_launched() const { return num_launched_; }
  // build()'s query rows whose token is pending, with the last launched step's logit row it is.
  const std::vector<PendingToken>& pending_tokens() const { return pending_; }

  // Captures the graph of every graph batch size up to max_graph_batch now, largest first (so the
  // buffers reach their final size before the smaller captures), each from a batch of padding
  // sequences only (nothing is written to the KV pages). The KV caches must be bound. Without
  // this, each size is captured the first time it runs. Returns the number of graphs held.
  int capture_graphs();
  // Drops every graph held (the workspace probe captures them over its scratch pool to measure
  // their memory, then drops them); later decode steps capture again as above.
  void release_graphs() { model_.release_graphs(); }

  // Whether decode steps replay graphs, and why not when they do not.
  bool graphs_enabled() const { return graphs_enabled_; }
  const std::string& graphs_disabled_reason() const { return graphs_disabled_reason_; }

 private:
  attn::AttentionBackend& backend_for(const StepBatch& batch) { return batch.is_decode() ? decode_ : prefill_; }
  // launch()'s host rows of batch_'s forward; host_logits: that forward's logits where they are
  // on the host already (sample_on_host), else null (read from the device).
  void copy_host_rows(HostRows& rows, const float* host_logits);

  Transformer& model_;
  attn::AttentionBackend& prefill_;
  attn::AttentionBackend& decode_;
  RunnerOptions options_;
  bool graphs_enabled_ = false;
  std::string graphs_disabled_reason_;
  StepBatch batch_;
  std::vector<TokenId> tokens_;  // one sequence's new tokens, reused
  std::vector<PendingToken> pending_;  // build()'s pending tokens
  std::vector<float> logits_;
  std::vector<float> final_rows_;
  std::vector<SampledRow> sampled_;
  // sample_on_host: the launched steps' samples not yet collected, oldest first, and the last
  // launched one's (the source of the next step's pending tokens).
  std::deque<std::vector<SampledRow>> host_queued_;
  std::vector<SampledRow> host_last_;
  int num_launched_ = 0;
};

}  // namespace spindle::engine
