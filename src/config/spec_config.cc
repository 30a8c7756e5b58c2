#include "config/spec_config.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "util/error.h"

namespace spindle::config {

const char* spec_algorithm_name(SpecAlgorithm a) {
  switch (a) {
    case SpecAlgorithm::kNone: return "none";
    case SpecAlgorithm::kNgram: return "ngram";
    case SpecAlgorithm::kDraft: return "draft";
  }
  return "?";
}

int default_draft_vocab_size(int vocab_size) {
  const int fraction = static_cast<int>(std::ceil(kDefaultDraftVocabFraction * vocab_size));
  return std::min(vocab_size, std::max(kMinDefaultDraftVocab, fraction));
}

ResolvedSpecConfig resolve_spec(const SpecFlags& f) {
  ResolvedSpecConfig r;
  if (f.algorithm.empty() || f.algorithm == "none") {
    r.algorithm = SpecAlgorithm::kNone;
  } else if (f.algorithm == "ngram") {
    r.algorithm = SpecAlgorithm::kNgram;
  } else if (f.algorithm == "draft") {
    r.algorithm = SpecAlgorithm::kDraft;
  } else {
    SPINDLE_FAIL("--speculative-algorithm '{}': expected ngram or draft", f.algorithm);
  }
  if (r.algorithm == SpecAlgorithm::kDraft) {
    SPINDLE_CHECK(!f.draft_model_path.empty(),
                  "--speculative-algorithm draft needs --speculative-draft-model-path (a model folder with the same "
                  "tokenizer)");
    std::error_code ec;
    SPINDLE_CHECK(std::filesystem::exists(std::filesystem::path(f.draft_model_path) / "config.json", ec),
                  "--speculative-draft-model-path {}: no config.json there", f.draft_model_path);
    r.draft_model_path = f.draft_model_path;
  } else {
    SPINDLE_CHECK(f.draft_model_path.empty(),
                  "--speculative-draft-model-path is given but --speculative-algorithm is not draft");
  }
  r.num_draft_tokens = f.num_draft_tokens == 0 ? kDefaultNumDraftTokens : f.num_draft_tokens;
  SPINDLE_CHECK(r.num_draft_tokens >= 1 && r.num_draft_tokens <= kMaxNumDraftTokens,
                "--speculative-num-draft-tokens {}: expected 1 to {}", r.num_draft_tokens, kMaxNumDraftTokens);
  r.ngram_min_window = f.ngram_min_window == 0 ? kDefaultNgramMinWindow : f.ngram_min_window;
  r.ngram_max_window = f.ngram_max_window == 0 ? std::max(kDefaultNgramMaxWindow, r.ngram_min_window) : f.ngram_max_window;
  SPINDLE_CHECK(r.ngram_min_window >= 1 && r.ngram_min_window <= r.ngram_max_window,
                "--speculative-ngram-min-match-window-size {} and --speculative-ngram-max-match-window-size {}: "
                "expected 1 <= min <= max",
                r.ngram_min_window, r.ngram_max_window);
  r.always = f.always;
  SPINDLE_CHECK(f.decode_log_interval >= 0, "--decode-log-interval {}: expected >= 0", f.decode_log_interval);
  r.decode_log_interval = f.decode_log_interval == 0 ? kDefaultDecodeLogInterval : f.decode_log_interval;
  SPINDLE_CHECK(f.draft_threads >= 0, "--speculative-draft-threads {}: expected >= 1 (or 0: auto)", f.draft_threads);
  r.draft_threads = f.draft_threads;
  SPINDLE_CHECK(f.draft_vocab_size >= 0,
                "--speculative-draft-vocab-size {}: expected the number of token ids the draft model proposes from "
                "(1 to the vocabulary size; 0: auto)",
                f.draft_vocab_size);
  SPINDLE_CHECK(f.draft_vocab_size == 0 || r.algorithm == SpecAlgorithm::kDraft,
                "--speculative-draft-vocab-size is given but --speculative-algorithm is not draft");
  return r;
}

void add_spec_flags(CLI::App& app, SpecFlags& f) {
  app.add_option("--speculative-algorithm", f.algorithm,
                 "Speculative decoding: ngram (prompt lookup) or draft (a smaller model with the same tokenizer); "
                 "off by default");
  app.add_option("--speculative-draft-model-path", f.draft_model_path, "The draft model folder (--speculative-algorithm draft)");
  app.add_option("--speculative-num-draft-tokens", f.num_draft_tokens,
                 fmt::format("Draft tokens proposed per step and request ({})", kDefaultNumDraftTokens));
  app.add_option("--speculative-ngram-min-match-window-size", f.ngram_min_window,
                 fmt::format("ngram: the shortest suffix matched against the context ({}; shorter matches are accepted less often, so they draft fewer tokens)", kDefaultNgramMinWindow));
  app.add_option("--speculative-ngram-max-match-window-size", f.ngram_max_window,
                 fmt::format("ngram: the longest suffix matched, tried first ({})", kDefaultNgramMaxWindow));
  app.add_flag("--speculative-always", f.always,
               "Speculate on every decode step (default: skip it where measured step times say it costs more than it "
               "saves)");
  app.add_option("--speculative-draft-threads", f.draft_threads,
                 fmt::format("CPU: the draft model's worker threads (min({}, --threads))", kDefaultDraftThreads));
  app.add_option("--speculative-draft-vocab-size", f.draft_vocab_size,
                 fmt::format("draft: the draft model proposes from the first N token ids only (its LM head computes "
                             "those; lossless, the target verifies). Default on the CPU: {:.1f}% of the vocabulary, "
                             "at least {}; on CUDA the whole vocabulary",
                             100 * kDefaultDraftVocabFraction, kMinDefaultDraftVocab));
  app.add_option("--decode-log-interval", f.decode_log_interval,
                 fmt::format("Decode steps between throughput log lines ({})", kDefaultDecodeLogInterval));
}

}  // namespace spindle::config
