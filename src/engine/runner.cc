#include "engine/runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/sampler.h"
#include "util/error.h"

namespace spindle::engine {

int graph_batch_size(int n) {
  if (n <= 1) return 1;
  if (n <= 2) return 2;
  if (n <= 4) return 4;
  return (n + 7) / 8 * 8;
}

bool is_uniform_verify(const StepBatch& batch) {
  const int n = batch.max_new_tokens;
  if (n < 2 || batch.num_sequences() == 0 || batch.num_padding_sequences != 0) return false;
  if (batch.num_logit_rows() != batch.num_sequences() * n) return false;
  for (const StepSequence& s : batch.sequences) {
    if (s.num_new_tokens != n || s.num_logit_rows != n || s.num_cached_tokens < 1) return false;
  }
  return true;
}

Runner::Runner(Transformer& model, attn::AttentionBackend& prefill, attn::AttentionBackend& decode,
               RunnerOptions options)
    : model_(model), prefill_(prefill), decode_(decode), options_(options) {
  check_attention_backends(&prefill, &decode, model.device());
  if (options_.max_graph_batch <= 0) {
    graphs_disabled_reason_ = "disabled (--disable-cuda-graph, or --cuda-graph-max-bs 0)";
  } else if (!model.supports_graphs()) {
    graphs_disabled_reason_ = fmt::format("{} has no step graphs", attn::device_name(model.device()));
  } else if (options_.max_model_len <= 0) {
    graphs_disabled_reason_ = "no --max-model-len to plan the graphs' attention for";
  } else {
    graphs_enabled_ = true;
  }
}

void Runner::bind_kv_caches(std::span<const attn::LayerKvCache> caches) {
  check_kv_caches(caches, model_.config().num_hidden_layers, model_.device());
  prefill_.bind_kv_caches(caches);
  if (&decode_ != &prefill_) decode_.bind_kv_caches(caches);
}

const StepBatch& Runner::build(const StepPlan& plan) {
  batch_.clear();
  pending_.clear();
  for (const ScheduledSequence& s : plan.sequences) {
    const Request& r = *s.request;
    // Its tokens from prompt + output, then its draft tokens (speculative decoding) after them.
    tokens_.resize(static_cast<size_t>(s.num_new_tokens));
    const int num_context = s.num_new_tokens - s.num_draft_tokens;
    for (int i = 0; i < num_context; ++i) {
      const int index = s.num_cached_tokens + i;
      TokenId token = r.token_at(index);
      if (token == kPendingToken) {  // still on the device: taken from the last launched step there
        SPINDLE_CHECK(index == r.num_known_tokens() && r.num_pending_tokens == 1 && r.pending_logit_row >= 0 &&
                          s.num_draft_tokens == 0,
                      "request {}: token {} is pending ({} pending after {} known, logit row {}) and cannot be built",
                      r.id, index, r.num_pending_tokens, r.num_known_tokens(), r.pending_logit_row);
        pending_.push_back({batch_.num_tokens() + i, r.pending_logit_row});
        token = 0;  // any id inside the vocabulary: the device overwrites it
      }
      tokens_[static_cast<size_t>(i)] = token;
    }
    for (int i = 0; i < s.num_draft_tokens; ++i) tokens_[static_cast<size_t>(num_context + i)] = r.draft.at(i);
    // Prompt rows are the query rows right before the sampling rows (scheduler.h), so the logit
    // rows stay the sequence's last ones.
    SPINDLE_CHECK(s.num_prompt_rows == 0 || s.first_prompt_row == s.num_cached_tokens + s.num_new_tokens - s.num_all_logit_rows(),
                  "request {}: prompt rows from position {} ({}) are not the last rows of its {} new tokens from {}", r.id,
                  s.first_prompt_row, s.num_prompt_rows, s.num_new_tokens, s.num_cached_tokens);
    const std::vector<int32_t>& pages = r.table.pages();
    batch_.add_sequence(tokens_.data(), s.num_new_tokens, s.num_cached_tokens, pages.data(),
                        static_cast<int32_t>(pages.size()), s.num_all_logit_rows());
  }
  return batch_;
}

std::span<float> Runner::run(const StepBatch& batch) {
  attn::AttentionBackend& attention = backend_for(batch);
  const kernels::cuda::DeviceBatch* uploaded = model_.upload(batch, attention.shape().page_size);
  attention.prepare(batch, uploaded);
  logits_.resize(static_cast<size_t>(batch.num_logit_rows()) * static_cast<size_t>(model_.config().vocab_size));
  model_.forward(batch, attention, logits_.data());
  return logits_;
}

std::span<const float> Runner::final_rows(const StepBatch& batch) {
  final_rows_.resize(static_cast<size_t>(batch.num_logit_rows()) * static_cast<size_t>(model_.config().hidden_size));
  model_.read_final_rows(final_rows_.data(), batch.num_logit_rows());
  return final_rows_;
}

int Runner::capture_graphs() {
  if (!graphs_enabled_) return 0;
  std::vector<int> sizes;
  for (int n = 1; n <= options_.max_graph_batch;) {
    const int size = graph_batch_size(n);
    sizes.push_back(std::min(size, options_.max_graph_batch));
    n = size + 1;
  }
  StepBatch padding;
  for (auto it = sizes.rbegin(); it != sizes.rend() && graphs_enabled_; ++it) {
    padding.clear();
    for (int i = 0; i < *it; ++i) padding.add_padding_sequence(0);
    const kernels::cuda::DeviceBatch* uploaded =
        model_.upload(padding, decode_.shape().page_size, options_.max_model_len);
    decode_.prepare(padding, uploaded);
    logits_.resize(static_cast<size_t>(*it) * static_cast<size_t>(model_.config().vocab_size));
    model_.forward(padding, decode_, logits_.data(), Transformer::StepMode::kGraph);  // eager, then captured
    if (!model_.last_capture_failure().empty()) {
      spdlog::warn("CUDA graphs off: capturing the decode step of {} sequences failed ({}); decode runs eagerly", *it,
                   model_.last_capture_failure());
      graphs_enabled_ = false;
      graphs_disabled_reason_ = "capture failed: " + model_.last_capture_failure();
    }
  }
  logits_.clear();
  logits_.shrink_to_fit();
  return model_.graph_stats().captured;
}

const std::vector<SampledRow>& Runner::run_and_sample(const SamplingBatch& sampling) {
  launch(sampling);
  return collect();
}

void Runner::launch(const SamplingBatch& sampling, HostRows* host_rows) {
  SPINDLE_CHECK(samples_on_device(), "launch: {} does not sample on the device", attn::device_name(model_.device()));
  SPINDLE_CHECK(static_cast<int>(sampling.rows.size()) == batch_.num_logit_rows(),
                "launch: {} sampling rows for {} logit rows", sampling.rows.size(), batch_.num_logit_rows());
  SPINDLE_CHECK(num_launched_ < 2, "launch: two steps are launched already (collect one first)");
  SPINDLE_CHECK(pending_.empty() || num_launched_ > 0, "launch: {} pending tokens but no step launched before",
                pending_.size());
  if (options_.sample_on_host && !model_.samples_on_device()) {
    for (const PendingToken& p : pending_) {
      SPINDLE_CHECK(p.source >= 0 && static_cast<size_t>(p.source) < host_last_.size(),
                    "pending token from logit row {} of a step of {}", p.source, host_last_.size());
      batch_.token_ids[static_cast<size_t>(p.row)] = host_last_[static_cast<size_t>(p.source)].token;
    }
    const std::span<float> logits = run(batch_);
    if (host_rows != nullptr) copy_host_rows(*host_rows, logits.data());  // before the sampler edits them
    sample_rows_on_host(logits, model_.config().vocab_size, sampling, host_last_);
    host_queued_.push_back(host_last_);
    ++num_launched_;
    return;
  }
  const int real = batch_.num_sequences();
  const bool decode_graph = graphs_enabled_ && real > 0 && batch_.is_decode() && batch_.num_logit_rows() == real &&
                            real <= options_.max_graph_batch;
  const bool verify_graph = graphs_enabled_ && options_.verify_graphs &&
                            real <= std::min(kMaxVerifyGraphSequences, options_.max_graph_batch) &&
                            batch_.max_new_tokens <= kMaxVerifyGraphTokens && is_uniform_verify(batch_);
  const bool graph = decode_graph || verify_graph;
  if (decode_graph) {
    const int size = std::min(graph_batch_size(real), options_.max_graph_batch);  // real <= max_graph_batch
    while (batch_.num_sequences() < size) batch_.add_padding_sequence(0);
  }
  attn::AttentionBackend& attention = backend_for(batch_);
  const kernels::cuda::DeviceBatch* uploaded =
      model_.upload(batch_, attention.shape().page_size, graph ? options_.max_model_len : 0);
  model_.take_pending_tokens(pending_);
  attention.prepare(batch_, uploaded);
  model_.forward(batch_, attention, nullptr, graph ? Transformer::StepMode::kGraph : Transformer::StepMode::kEager);
  if (graph && !model_.last_capture_failure().empty()) {
    spdlog::warn("CUDA graphs off: capturing the {} step of {} sequences failed ({}); steps run eagerly",
                 decode_graph ? "decode" : "verify", batch_.num_sequences(), model_.last_capture_failure());
    graphs_enabled_ = false;
    graphs_disabled_reason_ = "capture failed: " + model_.last_capture_failure();
  }
  if (host_rows != nullptr) copy_host_rows(*host_rows, nullptr);
  model_.queue_sample(sampling);
  ++num_launched_;
}

void Runner::copy_host_rows(HostRows& rows, const float* host_logits) {
  const size_t n = static_cast<size_t>(batch_.num_logit_rows());
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  rows.logits.clear();
  rows.final_rows.clear();
  if (rows.want_logits) {
    rows.logits.resize(n * vocab);
    if (host_logits != nullptr) {
      std::copy(host_logits, host_logits + n * vocab, rows.logits.begin());
    } else {
      model_.read_logits(rows.logits.data(), static_cast<int64_t>(n));
    }
  }
  if (rows.want_final_rows) {
    rows.final_rows.resize(n * static_cast<size_t>(model_.config().hidden_size));
    model_.read_final_rows(rows.final_rows.data(), static_cast<int64_t>(n));
  }
}

const std::vector<SampledRow>& Runner::collect() {
  SPINDLE_CHECK(num_launched_ > 0, "collect: no step launched");
  --num_launched_;
  if (options_.sample_on_host && !model_.samples_on_device()) {
    sampled_ = std::move(host_queued_.front());
    host_queued_.pop_front();
    return sampled_;
  }
  model_.collect_sample(sampled_);
  return sampled_;
}

}  // namespace spindle::engine
