#include "startup/draft_model.h"

#include <string_view>

#include "startup/backend_selection.h"
#include "startup/kv_planning.h"
#include "util/error.h"

namespace spindle::startup {

namespace {
// Text whose encoding two tokenizers must agree on to count as the same (words, digits,
// punctuation, spaces, non-ASCII).
constexpr std::string_view kTokenizerProbe =
    "In the beginning God created the heaven and the earth. 1234567890 -- \"quoted\", (parens); "
    "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\n\tTabs  and  spaces.";
}  // namespace

std::unique_ptr<DraftModel> load_draft_model(const std::filesystem::path& dir, const config::ServerConfig& flags,
                                             const config::ResolvedConfig& target, const DeviceInfo& device,
                                             const tokenizer::Tokenizer& target_tokenizer,
                                             const ModelConfig& target_config, const LoadOptions& load_options,
                                             const attn::BackendOptions& backend_options) {
  auto d = std::make_unique<DraftModel>();
  d->dir = dir;
  d->config = load_model_config(dir);
  SPINDLE_CHECK(d->config.vocab_size == target_config.vocab_size,
                "--speculative-draft-model-path {}: config.json vocab_size {} differs from the target's {} (the draft "
                "must share the target's tokenizer)",
                dir.string(), d->config.vocab_size, target_config.vocab_size);
  SPINDLE_CHECK(d->config.max_position_embeddings >= target.kv.max_model_len,
                "--speculative-draft-model-path {}: config.json max_position_embeddings {} is below --max-model-len {}; "
                "lower --max-model-len or use a draft that covers it",
                dir.string(), d->config.max_position_embeddings, target.kv.max_model_len);
  const tokenizer::Tokenizer draft_tokenizer = tokenizer::Tokenizer::load(dir);
  SPINDLE_CHECK(draft_tokenizer.vocab_size() == target_tokenizer.vocab_size() &&
                    draft_tokenizer.encode(kTokenizerProbe) == target_tokenizer.encode(kTokenizerProbe),
                "--speculative-draft-model-path {}: tokenizer.json does not encode like the target's ({} vs {} tokens "
                "in the vocabulary); the draft must share the target's tokenizer",
                dir.string(), draft_tokenizer.vocab_size(), target_tokenizer.vocab_size());

  // The target's flags for the draft's shape; the draft runs at the target's model length.
  config::ServerConfig draft_flags = flags;
  draft_flags.kv.max_model_len = target.kv.max_model_len;
  draft_flags.spec = {};
  d->resolved = config::resolve(draft_flags, device, d->config);
  d->selection = select_attention(d->resolved, device);
  LoadOptions draft_load = load_options;
  attn::BackendOptions draft_backend = backend_options;
  if (target.device == attn::Device::kCpu && target.spec.draft_threads != target.num_threads) {
    d->threads = std::make_unique<ThreadPool>(target.spec.draft_threads);
    draft_load.cpu.pool = d->threads.get();
    draft_backend.pool = d->threads.get();
  }
  d->model = load_model(dir, draft_load);
  // The draft proposes from the first draft_vocab_size token ids (config::resolve's choice).
  if (target.spec.draft_vocab_size > 0) d->model->limit_logit_ids(target.spec.draft_vocab_size);
  const attn::AttentionShape shape = d->model->attention_shape(target.kv_dtype, target.page_size);
  d->prefill_backend = attn::create_attention_backend(d->selection.prefill_backend, shape, {}, draft_backend);
  d->decode_backend = attn::create_attention_backend(d->selection.decode_backend, shape, {}, draft_backend);
  engine::RunnerOptions runner_options;
  runner_options.max_graph_batch = target.cuda_graph_max_bs;
  runner_options.max_model_len = target.kv.max_model_len;
  d->runner = std::make_unique<engine::Runner>(*d->model, *d->prefill_backend, *d->decode_backend, runner_options);
  d->layout = kv_layout_for(d->config, target.kv_dtype, target.page_size);
  return d;
}

void DraftModel::create_pool(int num_pages, int max_num_batched_tokens) {
  pool = std::make_unique<kv::PagePool>(layout, num_pages, 1, resolved.device);
  runner->bind_kv_caches(pool->layer_caches());
  if (runner->graphs_enabled()) runner->capture_graphs();
  proposer = std::make_unique<engine::speculative::DraftModelProposer>(*runner, *pool, max_num_batched_tokens);
}

}  // namespace spindle::startup
