// Runner: turns the scheduler's plan into ONE StepBatch (kernels/step_batch.h) and runs it: the
// batch is checked and uploaded once, the attention backend of the step's phase is prepared
// with it (decode when every sequence has at most one new token, else prefill: decided here
// only, from StepBatch::is_decode), then the transformer runs every layer. The runner, not the
// model, owns the choice of backend and calls prepare.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <span>
#include <vector>

#include "attn/attention_backend.h"
#include "engine/scheduler.h"
#include "kernels/step_batch.h"
#include "model/transformer.h"

namespace spindle::engine {

class Runner {
 public:
  // Borrows the model and the backends (both running on the model's device; may be the same).
  Runner(Transformer& model, attn::AttentionBackend& prefill, attn::AttentionBackend& decode);

  Transformer& model() { return model_; }
  // One cache per layer on the model's device, handed to both backends.
  void bind_kv_caches(std::span<const attn::LayerKvCache> caches);

  // The step's batch from the plan: every scheduled sequence's new tokens (from its request's
  // prompt + output), cached length, page table, and one logit row when its context completes.
  // Valid until the next build().
  const StepBatch& build(const StepPlan& plan);
  // Runs one step over `batch` (build()'s, or any StepBatch a test or probe made) and returns
  // host logits [batch.num_logit_rows(), vocab_size] (the sampler may modify them), valid until
  // the next run().
  std::span<float> run(const StepBatch& batch);

 private:
  Transformer& model_;
  attn::AttentionBackend& prefill_;
  attn::AttentionBackend& decode_;
  StepBatch batch_;
  std::vector<TokenId> tokens_;  // one sequence's new tokens, reused
  std::vector<float> logits_;
};

}  // namespace spindle::engine
