// StepBatch: one engine step's batch, built once per step (by engine::Runner from the scheduler's
// output) and read, without being copied into other forms, by the transformer, the attention
// backends and the kernels of every device. Plain data, C++17 (CUDA .cu files include it).
//
// Layout. The step computes num_tokens() query rows: every sequence's new tokens, concatenated in
// sequence order. Sequence s owns rows [query_offset, query_offset + num_new_tokens); its row i
// sits at position num_cached_tokens + i. Its page table is
// page_tables[page_table_offset, page_table_offset + num_pages) (rank-local page ids); token t
// of the sequence lives in page page_tables[page_table_offset + t / page_size], slot
// t % page_size. It wants logits for its last num_logit_rows rows (0 <= num_logit_rows <=
// num_new_tokens: 0 for a prefill chunk that does not end the prompt, 1 for decode, K + 1 when
// verifying K draft tokens), written to the step's logit rows [logit_offset, logit_offset +
// num_logit_rows). logit_rows lists, per logit row, the query row it reads.
//
// Attention is causal unless `causal` is false: row i of s attends to positions
// [0, num_cached_tokens + i]; otherwise to all num_cached_tokens + num_new_tokens positions.
//
// A StepBatch on the host owns its arrays; StepBatchView is the same data as pointers, in host or
// device memory (kernels::cuda::DeviceBatch uploads the host arrays once per step).
#pragma once

#include <cstdint>
#include <vector>

#include "util/token_id.h"

namespace spindle {

struct StepSequence {
  int32_t query_offset = 0;       // first query row of the sequence in the step
  int32_t num_new_tokens = 0;     // its query rows this step (1 for decode, K + 1 to verify K drafts)
  int32_t num_cached_tokens = 0;  // positions already in its pages before this step
  int32_t page_table_offset = 0;  // its first entry in page_tables
  int32_t num_pages = 0;          // entries of its page table: >= ceil((cached + new) / page_size)
  int32_t logit_offset = 0;       // its first row in the step's logits
  int32_t num_logit_rows = 0;     // logits for its last num_logit_rows query rows
};

// The step as pointers (host or device memory, all in the same one).
struct StepBatchView {
  const TokenId* token_ids = nullptr;       // [num_tokens]
  const int64_t* positions = nullptr;       // [num_tokens]
  const StepSequence* sequences = nullptr;  // [num_sequences]
  const int32_t* page_tables = nullptr;     // [num_page_entries]
  const int64_t* logit_rows = nullptr;      // [num_logit_rows] query row of each logit row
  int32_t num_tokens = 0;
  int32_t num_sequences = 0;
  int32_t num_page_entries = 0;
  int32_t num_logit_rows = 0;
  int32_t max_new_tokens = 0;  // max over sequences: 1 means a decode step
  int32_t max_kv_len = 0;      // max over sequences of cached + new
  bool causal = true;
};

// The host StepBatch. Build it with clear() and add_sequence(); the derived arrays (positions,
// logit_rows) and the maxima are kept up to date by add_sequence.
struct StepBatch {
  std::vector<TokenId> token_ids;
  std::vector<int64_t> positions;
  std::vector<StepSequence> sequences;
  std::vector<int32_t> page_tables;
  std::vector<int64_t> logit_rows;
  int32_t max_new_tokens = 0;
  int32_t max_kv_len = 0;
  bool causal = true;
  // The last num_padding_sequences sequences only fill a CUDA graph's batch size (one token at
  // position 0 each, add_padding_sequence): devices do not keep their K/V, nobody reads their logits.
  int32_t num_padding_sequences = 0;

  void clear() {
    token_ids.clear();
    positions.clear();
    sequences.clear();
    page_tables.clear();
    logit_rows.clear();
    max_new_tokens = 0;
    max_kv_len = 0;
    causal = true;
    num_padding_sequences = 0;
  }

  // Appends a sequence: its new tokens (num_new_tokens of them), the positions already cached, its
  // page table (num_pages entries) and how many of its last rows want logits. Returns its index.
  // Sizes are checked by check_step_batch (model and backends do), not here.
  int add_sequence(const TokenId* new_tokens, int32_t num_new_tokens, int32_t num_cached_tokens,
                   const int32_t* page_table, int32_t num_pages, int32_t num_logit_rows) {
    StepSequence s;
    s.query_offset = num_tokens();
    s.num_new_tokens = num_new_tokens;
    s.num_cached_tokens = num_cached_tokens;
    s.page_table_offset = static_cast<int32_t>(page_tables.size());
    s.num_pages = num_pages;
    s.logit_offset = static_cast<int32_t>(logit_rows.size());
    s.num_logit_rows = num_logit_rows;
    for (int32_t i = 0; i < num_new_tokens; ++i) {
      token_ids.push_back(new_tokens[i]);
      positions.push_back(int64_t{num_cached_tokens} + i);
    }
    page_tables.insert(page_tables.end(), page_table, page_table + num_pages);
    for (int32_t i = num_new_tokens - num_logit_rows; i < num_new_tokens; ++i) {
      logit_rows.push_back(int64_t{s.query_offset} + i);
    }
    if (num_new_tokens > max_new_tokens) max_new_tokens = num_new_tokens;
    if (num_cached_tokens + num_new_tokens > max_kv_len) max_kv_len = num_cached_tokens + num_new_tokens;
    sequences.push_back(s);
    return static_cast<int>(sequences.size()) - 1;
  }

  // A padding sequence (see num_padding_sequences): token 0 at position 0, its page table the one
  // entry `page` (read, never written), one logit row. After every real sequence.
  void add_padding_sequence(int32_t page) {
    const TokenId token = 0;
    add_sequence(&token, 1, 0, &page, 1, 1);
    ++num_padding_sequences;
  }
  int32_t num_real_sequences() const { return num_sequences() - num_padding_sequences; }

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_sequences() const { return static_cast<int32_t>(sequences.size()); }
  int32_t num_logit_rows() const { return static_cast<int32_t>(logit_rows.size()); }
  // Every sequence has at most one new token: the decode backend's step.
  bool is_decode() const { return max_new_tokens <= 1; }
  const int32_t* page_table(const StepSequence& s) const { return page_tables.data() + s.page_table_offset; }

  StepBatchView view() const {
    StepBatchView v;
    v.token_ids = token_ids.data();
    v.positions = positions.data();
    v.sequences = sequences.data();
    v.page_tables = page_tables.data();
    v.logit_rows = logit_rows.data();
    v.num_tokens = num_tokens();
    v.num_sequences = num_sequences();
    v.num_page_entries = static_cast<int32_t>(page_tables.size());
    v.num_logit_rows = num_logit_rows();
    v.max_new_tokens = max_new_tokens;
    v.max_kv_len = max_kv_len;
    v.causal = causal;
    return v;
  }
};

}  // namespace spindle
