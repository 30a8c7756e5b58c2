// The CPU workspace probe reserves the step's scratch without running it: that is a measurement
// only while the forward itself allocates nothing more that Transformer::workspace_bytes()
// counts. Checked both ways on a golden model: a real forward after the probe grows nothing, and
// a fresh model's real forward of the same step reaches exactly the probe's number.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "attn/attention_backend.h"
#include "engine/runner.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "startup/kv_planning.h"
#include "startup/workspace_probe.h"

namespace spindle::startup {
namespace {

const std::string kModel = std::string(SPINDLE_FIXTURES_DIR) + "/../golden/llama-gqa-f32";
constexpr int kPage = 16;

struct Loaded {
  std::unique_ptr<Transformer> model;
  std::unique_ptr<attn::AttentionBackend> backend;
  std::unique_ptr<engine::Runner> runner;
};

Loaded load() {
  Loaded l;
  l.model = load_cpu_model(kModel);
  l.backend = attn::create_attention_backend("reference", l.model->attention_shape(DType::kBF16, kPage), {}, {});
  l.runner = std::make_unique<engine::Runner>(*l.model, *l.backend, *l.backend);
  return l;
}

// The probe's step, really run: 300 tokens in sequences of 128, 128 and 44, one logit row each.
void run_step(Loaded& l) {
  const ModelConfig& c = l.model->config();
  StepBatch batch;
  std::vector<TokenId> tokens(128, 3);
  std::vector<int32_t> pages;
  int next_page = 0;
  for (const int n : {128, 128, 44}) {
    const int num_pages = (n + kPage - 1) / kPage;
    pages.clear();
    for (int i = 0; i < num_pages; ++i) pages.push_back(next_page++);
    batch.add_sequence(tokens.data(), n, 0, pages.data(), num_pages, 1);
  }
  kv::PagePool pool(kv_layout_for(c, DType::kBF16, kPage), next_page);
  l.runner->bind_kv_caches(pool.layer_caches());
  l.runner->run(batch);
}

TEST(WorkspaceProbeTest, CpuProbeEqualsWhatTheRealStepAllocates) {
  Loaded probed = load();
  const ModelConfig& c = probed.model->config();
  const uint64_t measured = measure_workspace_bytes(*probed.runner, DType::kBF16, kPage, 300, 128);
  const uint64_t scratch = probed.model->workspace_bytes();
  // The engine's logits for 300 rows and the final-norm rows beyond the 3 the step has.
  EXPECT_EQ(measured, scratch + 300u * c.vocab_size * 4 + (300u - 3) * c.hidden_size * 4);
  // The scratch alone is at least the f32 activations of 300 tokens (3H + 2Q + 2K + 3I per token).
  EXPECT_GE(scratch, 300u * 4 * (3u * c.hidden_size + 2u * c.q_size() + 2u * c.kv_size() + 3u * c.intermediate_size));
  run_step(probed);
  EXPECT_EQ(probed.model->workspace_bytes(), scratch) << "the forward allocated what the probe did not count";

  Loaded fresh = load();
  run_step(fresh);
  EXPECT_EQ(fresh.model->workspace_bytes(), scratch);
}

}  // namespace
}  // namespace spindle::startup
