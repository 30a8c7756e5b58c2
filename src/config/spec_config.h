// The speculative-decoding flags (SGLang's names where the concept is the same) and their
// defaults, decided in resolve_spec(), called from config::resolve() and nowhere else.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace spindle::config {

inline constexpr int kDefaultNumDraftTokens = 4;
// Short matches (1-2 tokens: "the", "and") propose drafts that are accepted less often (on
// bench/spec's repeating prompts with kjv-tiny about 0.4 per token after a 1-token match, 0.7
// after 3): with 4 drafts on every step min 1 was slower than min 3 (164 against 337 tok/s,
// bench/results/2026-12-01-spec). Since the engine measures acceptance per match length and the
// cost model picks the draft count, a short match drafts few tokens (a 2-row verify costs ~1.07x
// a plain step on the CPU), and matching from 1 token finds drafts on more steps: replaying the
// greedy outputs of those prompts with the measured verify costs, min 1 bounds the speed-up at
// 1.43x against 1.29x for min 3 (bench/results/2026-12-01-spec/dev-vm-3).
inline constexpr int kDefaultNgramMinWindow = 1;   // SGLang's speculative-ngram-min-match-window-size
inline constexpr int kDefaultNgramMaxWindow = 12;  // SGLang's speculative-ngram-max-match-window-size
inline constexpr int kDefaultDecodeLogInterval = 40;  // decode steps between log lines (SGLang's default)
inline constexpr int kMaxNumDraftTokens = 16;
// CPU: the draft model's worker threads at most (a small model's forward is bound by the
// per-operation hand-off to its threads, which grows with their number).
inline constexpr int kDefaultDraftThreads = 4;

struct SpecFlags {
  std::string algorithm;           // "" (off) | ngram | draft
  std::string draft_model_path;    // --speculative-draft-model-path, for draft
  int num_draft_tokens = 0;        // 0: kDefaultNumDraftTokens
  int ngram_min_window = 0;        // 0: kDefaultNgramMinWindow
  int ngram_max_window = 0;        // 0: kDefaultNgramMaxWindow
  bool always = false;             // speculate every step (no cost check)
  int decode_log_interval = 0;     // 0: kDefaultDecodeLogInterval
  int draft_threads = 0;           // 0: min(kDefaultDraftThreads, --threads)
};

enum class SpecAlgorithm { kNone, kNgram, kDraft };
const char* spec_algorithm_name(SpecAlgorithm a);  // "none", "ngram", "draft"

struct ResolvedSpecConfig {
  SpecAlgorithm algorithm = SpecAlgorithm::kNone;
  std::string draft_model_path;
  int num_draft_tokens = kDefaultNumDraftTokens;
  int ngram_min_window = kDefaultNgramMinWindow;
  int ngram_max_window = kDefaultNgramMaxWindow;
  bool always = false;
  int decode_log_interval = kDefaultDecodeLogInterval;
  int draft_threads = 0;  // CPU: the draft model's thread pool (set by config::resolve from --threads)
};

// Throws spindle::Error naming the flag: an unknown algorithm, draft without a draft model path
// (or a path without config.json), a path without draft, num_draft_tokens outside
// [1, kMaxNumDraftTokens], windows with min > max or < 1, a negative log interval.
ResolvedSpecConfig resolve_spec(const SpecFlags& flags);

// --speculative-algorithm, --speculative-draft-model-path, --speculative-num-draft-tokens,
// --speculative-ngram-min-match-window-size, --speculative-ngram-max-match-window-size,
// --speculative-always, --decode-log-interval.
void add_spec_flags(CLI::App& app, SpecFlags& flags);

}  // namespace spindle::config
