#include "kernels/cuda/split_policy.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/paged_attention.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {

int flash_decode_min_chunk_keys() { return switches().flash_decode_min_chunk; }
int flash_decode_blocks_per_sm() { return switches().flash_decode_blocks_per_sm; }

namespace {

constexpr int kPageSize = 16;

// One decode step's device inputs: batch sequences of kv_len keys each (the last one new), every
// sequence with its own pages, numbered in order; q, K and V zero.
struct StepInputs {
  DeviceBuffer k_pages, v_pages, q, out, sequences, page_tables, workspace;
  detail::PagedLayerLaunch launch;
};

void build_step(StepInputs& s, const SplitStep& step, int num_heads, int num_kv_heads, int head_dim,
                detail::KvType kv_type, int num_sms) {
  const int pages_per_sequence = (step.kv_len + kPageSize - 1) / kPageSize;
  const int num_pages = step.batch * pages_per_sequence;
  const KvGeometry kv{.num_layers = 1,
                      .num_kv_heads = num_kv_heads,
                      .head_dim = head_dim,
                      .page_size = kPageSize,
                      .dtype = kv_type == detail::KvType::kF16 ? DType::kF16 : DType::kBF16,
                      .num_pages = num_pages,
                      .first_page = 0};
  const size_t page_bytes = kv.layer_page_bytes();
  const size_t rows_bytes = size_t(step.batch) * size_t(num_heads) * size_t(head_dim) * sizeof(float);
  s.k_pages.reserve(page_bytes * size_t(num_pages));
  s.v_pages.reserve(page_bytes * size_t(num_pages));
  s.q.reserve(rows_bytes);
  s.out.reserve(rows_bytes);
  fill_zero(s.k_pages.data(), s.k_pages.size());
  fill_zero(s.v_pages.data(), s.v_pages.size());
  fill_zero(s.q.data(), s.q.size());
  std::vector<StepSequence> sequences(static_cast<size_t>(step.batch));
  std::vector<int32_t> tables(static_cast<size_t>(num_pages));
  for (int i = 0; i < step.batch; ++i) {
    StepSequence& q = sequences[static_cast<size_t>(i)];
    q.query_offset = i;
    q.num_new_tokens = 1;
    q.num_cached_tokens = step.kv_len - 1;
    q.page_table_offset = i * pages_per_sequence;
    q.num_pages = pages_per_sequence;
  }
  for (int p = 0; p < num_pages; ++p) tables[static_cast<size_t>(p)] = p;
  s.sequences.reserve(sequences.size() * sizeof(StepSequence));
  s.page_tables.reserve(tables.size() * sizeof(int32_t));
  copy_to_device(s.sequences.data(), sequences.data(), sequences.size() * sizeof(StepSequence));
  copy_to_device(s.page_tables.data(), tables.data(), tables.size() * sizeof(int32_t));

  detail::PagedLayerLaunch& a = s.launch;
  a.q = s.q.as<float>();
  a.out = s.out.as<float>();
  a.k_pages = s.k_pages.data();
  a.v_pages = s.v_pages.data();
  a.kv = kv;
  a.num_heads = num_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  a.batch.sequences = s.sequences.as<StepSequence>();
  a.batch.page_tables = s.page_tables.as<int32_t>();
  a.batch.num_sequences = step.batch;
  a.batch.num_rows = step.batch;
  a.batch.max_new_tokens = 1;
  a.batch.max_kv_len = step.kv_len;
  a.batch.causal = true;
  a.num_sms = num_sms;
}

// Median microseconds per launch over `rounds` (the caller alternates candidates between calls).
double time_launches(StepInputs& s, int launches, cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) {
  detail::PagedLayerLaunch& a = s.launch;
  const size_t bytes = detail::flash_decode_workspace_bytes(a);  // depends on the registry's split sizes
  if (bytes > s.workspace.size()) s.workspace.reserve(bytes);
  a.workspace = bytes > 0 ? s.workspace.data() : nullptr;
  a.workspace_bytes = bytes;
  detail::launch_flash_decode(a, stream);  // warm: the first launch of a configuration sets attributes
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < launches; ++i) detail::launch_flash_decode(a, stream);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return 1000.0 * ms / launches;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

SplitMeasurement measure_flash_decode_splits(int num_heads, int num_kv_heads, int head_dim, detail::KvType kv_type,
                                             int rounds, int launches) {
  SPINDLE_CHECK(detail::flash_decode_supports(head_dim, kv_type) && num_kv_heads > 0 && num_heads % num_kv_heads == 0,
                "flash decode split measurement: head_dim {} / {} heads over {} KV heads not supported", head_dim,
                num_heads, num_kv_heads);
  SPINDLE_CHECK(rounds >= 1 && launches >= 1, "flash decode split measurement: rounds and launches must be >= 1");
  const int num_sms = current_device_sm_count();
  constexpr size_t kNumSteps = std::size(kSplitSteps);
  constexpr size_t kNumCandidates = std::size(kSplitCandidates);
  StepInputs inputs[kNumSteps];
  for (size_t s = 0; s < kNumSteps; ++s) build_step(inputs[s], kSplitSteps[s], num_heads, num_kv_heads, head_dim, kv_type, num_sms);

  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::vector<std::vector<double>>> samples(kNumCandidates, std::vector<std::vector<double>>(kNumSteps));
  try {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int r = 0; r < rounds; ++r) {
      for (size_t c = 0; c < kNumCandidates; ++c) {
        Switches values = switches();
        values.flash_decode_min_chunk = kSplitCandidates[c].min_chunk_keys;
        values.flash_decode_blocks_per_sm = kSplitCandidates[c].blocks_per_sm;
        const ScopedSwitches scoped(values);  // the plan of every launch below reads these
        for (size_t s = 0; s < kNumSteps; ++s) {
          samples[c][s].push_back(time_launches(inputs[s], launches, stream, start, stop));
        }
      }
    }
  } catch (...) {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));

  SplitMeasurement m;
  m.us.assign(kNumCandidates, std::vector<double>(kNumSteps, 0.0));
  for (size_t c = 0; c < kNumCandidates; ++c) {
    for (size_t s = 0; s < kNumSteps; ++s) m.us[c][s] = median(samples[c][s]);
  }
  // A candidate replaces the defaults (candidate 0, score kNumSteps) only where it is faster by
  // more than kMinGain on average over the steps: run-to-run noise moves no value.
  constexpr double kMinGain = 0.02;
  double best_score = static_cast<double>(kNumSteps) * (1.0 - kMinGain);
  m.best = kSplitCandidates[0];
  for (size_t c = 1; c < kNumCandidates; ++c) {
    double score = 0;  // time relative to the defaults', summed over the steps
    for (size_t s = 0; s < kNumSteps; ++s) score += m.us[c][s] / std::max(m.us[0][s], 1e-9);
    if (score < best_score) {
      best_score = score;
      m.best = kSplitCandidates[c];
    }
  }
  return m;
}

}  // namespace spindle::kernels::cuda
