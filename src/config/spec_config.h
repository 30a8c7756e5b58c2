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

// The draft model's LM head covers the first N token ids only (a BPE vocabulary's ids in merge
// order: the earliest merges are the corpus's most frequent pairs, so low ids are the frequent
// tokens), the FR-Spec idea: the draft only proposes, the target verifies, so output stays
// lossless whatever the subset (a target token outside it is simply never drafted). Default
// (auto, CPU): kDefaultDraftVocabFraction of the vocabulary, at least kMinDefaultDraftVocab ids.
// Measured on kjv-tiny + kjv-draft (vocabulary 4096, bench/results/2026-12-02-spec-vocab).
inline constexpr double kDefaultDraftVocabFraction = 0.375;
inline constexpr int kMinDefaultDraftVocab = 1024;
// The default for a vocabulary of vocab_size ids on the CPU (the whole vocabulary when it is
// not larger than kMinDefaultDraftVocab).
int default_draft_vocab_size(int vocab_size);

struct SpecFlags {
  std::string algorithm;           // "" (off) | ngram | draft
  std::string draft_model_path;    // --speculative-draft-model-path, for draft
  int num_draft_tokens = 0;        // 0: kDefaultNumDraftTokens
  int ngram_min_window = 0;        // 0: kDefaultNgramMinWindow
  int ngram_max_window = 0;        // 0: kDefaultNgramMaxWindow
  bool always = false;             // speculate every step (no cost check)
  int decode_log_interval = 0;     // 0: kDefaultDecodeLogInterval
  int draft_threads = 0;           // 0: min(kDefaultDraftThreads, --threads)
  int draft_vocab_size = 0;        // --speculative-draft-vocab-size; 0: auto (config::resolve)
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
  // The draft's LM head computes token ids [0, draft_vocab_size) (config::resolve sets it from
  // the model's vocabulary: auto, or the flag checked against it); 0 before that, and always for
  // a non-draft algorithm.
  int draft_vocab_size = 0;
};

// Throws spindle::Error naming the flag: an unknown algorithm, draft without a draft model path
// (or a path without config.json), a path without draft, num_draft_tokens outside
// [1, kMaxNumDraftTokens], windows with min > max or < 1, a negative log interval, a negative
// --speculative-draft-vocab-size or one without draft.
ResolvedSpecConfig resolve_spec(const SpecFlags& flags);

// --speculative-algorithm, --speculative-draft-model-path, --speculative-num-draft-tokens,
// --speculative-ngram-min-match-window-size, --speculative-ngram-max-match-window-size,
// --speculative-always, --speculative-draft-threads, --speculative-draft-vocab-size,
// --decode-log-interval.
void add_spec_flags(CLI::App& app, SpecFlags& flags);

}  // namespace spindle::config
