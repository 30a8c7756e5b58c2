#include "attn/select/validation.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>

#include "attn/random_batch.h"
#include "attn/staged_batch.h"
#include "platform/cuda_info.h"
#include "util/child_process.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::attn {

Tolerance tolerance_for(DType kv_dtype) {
  // See the header for the reasoning.
  // FP8 KV: candidate and reference read the same FP8 pages (the reference exactly, in float64), so
  // the quantization itself is not in the difference; the CPU kernels compute in f32 as for f32 KV,
  // and the tensor-core kernels round q and P to 16 bits as for bf16 KV: bf16's bound covers both.
  return kv_dtype == DType::kF32 ? Tolerance{2e-4} : Tolerance{1.5e-2};
}

// ---- JSON ---------------------------------------------------------------------------------------

nlohmann::json to_json(const CheckReport& r) {
  return {{"backend", r.backend},
          {"shape", r.shape},
          {"passed", r.passed},
          {"tolerance", r.tolerance},
          {"prefill_max_abs_error", r.prefill_max_abs_error},
          {"prefill_max_rel_error", r.prefill_max_rel_error},
          {"decode_max_abs_error", r.decode_max_abs_error},
          {"decode_max_rel_error", r.decode_max_rel_error},
          {"timed", r.timed},
          {"prefill_tokens_per_s", r.prefill_tokens_per_s},
          {"prefill_gflops", r.prefill_gflops},
          {"decode_tokens_per_s", r.decode_tokens_per_s},
          {"decode_kv_gb_per_s", r.decode_kv_gb_per_s},
          {"decode_latency_tokens_per_s", r.decode_latency_tokens_per_s},
          {"peak_rss_bytes", r.peak_rss_bytes},
          {"error", r.error}};
}

namespace {

// JSON has no infinity or NaN: nlohmann writes them as null, which reads back as infinity here
// (an error that large fails any tolerance, as it should).
double error_from_json(const nlohmann::json& value) {
  return value.is_null() ? std::numeric_limits<double>::infinity() : value.get<double>();
}

}  // namespace

CheckReport check_report_from_json(const nlohmann::json& j) {
  CheckReport r;
  r.backend = j.at("backend").get<std::string>();
  r.shape = j.at("shape").get<std::string>();
  r.passed = j.at("passed").get<bool>();
  r.tolerance = j.at("tolerance").get<double>();
  r.prefill_max_abs_error = error_from_json(j.at("prefill_max_abs_error"));
  r.prefill_max_rel_error = error_from_json(j.at("prefill_max_rel_error"));
  r.decode_max_abs_error = error_from_json(j.at("decode_max_abs_error"));
  r.decode_max_rel_error = error_from_json(j.at("decode_max_rel_error"));
  r.timed = j.at("timed").get<bool>();
  r.prefill_tokens_per_s = j.at("prefill_tokens_per_s").get<double>();
  r.prefill_gflops = j.at("prefill_gflops").get<double>();
  r.decode_tokens_per_s = j.at("decode_tokens_per_s").get<double>();
  r.decode_kv_gb_per_s = j.at("decode_kv_gb_per_s").get<double>();
  r.decode_latency_tokens_per_s = j.value("decode_latency_tokens_per_s", 0.0);
  r.peak_rss_bytes = j.at("peak_rss_bytes").get<int64_t>();
  r.error = j.at("error").get<std::string>();
  return r;
}

double decode_selection_speed(const CheckReport& report) {
  if (report.decode_latency_tokens_per_s <= 0) return report.decode_tokens_per_s;
  return std::sqrt(report.decode_tokens_per_s * report.decode_latency_tokens_per_s);
}

nlohmann::json to_json(const ValidationOutcome& o) {
  return {{"status", check_status_name(o.status)}, {"detail", o.detail}, {"report", to_json(o.report)}};
}

ValidationOutcome validation_outcome_from_json(const nlohmann::json& j) {
  return {check_status_from_name(j.at("status").get<std::string>()), j.at("detail").get<std::string>(),
          check_report_from_json(j.at("report"))};
}

// ---- The check (child side) ---------------------------------------------------------------------

namespace {

struct ErrorStats {
  double max_abs = 0;
  double max_rel = 0;
};

ErrorStats compare(const std::vector<float>& got, const std::vector<float>& want) {
  ErrorStats e;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(double{got[i]} - double{want[i]});
    if (!std::isfinite(got[i])) {
      e.max_abs = e.max_rel = std::numeric_limits<double>::infinity();
      return e;
    }
    e.max_abs = std::max(e.max_abs, diff);
    e.max_rel = std::max(e.max_rel, diff / std::max(std::fabs(double{want[i]}), 1e-3));
  }
  return e;
}

// The candidate and `reference` on identical copies of one random batch.
ErrorStats check_batch(const std::string& backend, const AttentionShape& shape,
                       const std::vector<SequenceSpec>& specs, uint64_t seed) {
  RandomBatch for_candidate = make_random_batch(shape, specs, seed);
  RandomBatch for_reference = for_candidate;
  auto candidate = create_attention_backend(backend, shape, {});
  auto reference = create_attention_backend("reference", shape, {});
  const auto got = run_backend_once(*candidate, for_candidate);
  const auto want = run_backend_once(*reference, for_reference);
  ErrorStats e = compare(got, want);
  // The new K/V must land in the pages exactly as the reference wrote them.
  if (for_candidate.k_pages != for_reference.k_pages || for_candidate.v_pages != for_reference.v_pages) {
    e.max_abs = e.max_rel = std::numeric_limits<double>::infinity();
  }
  return e;
}

// Seconds per forward over a batch staged once on the backend's device (CUDA: the kernels alone,
// synchronized): one warm-up, then repeats until ~0.3 s (at least 2 runs, or 1 when slow).
double time_forward(AttentionBackend& backend, RandomBatch& batch) {
  using Clock = std::chrono::steady_clock;
  StagedBatch staged(batch, backend.device());
  LayerKvCache cache = staged.layer_cache();
  backend.bind_kv_caches({&cache, 1});
  auto once = [&] {
    const auto t0 = Clock::now();
    backend.prepare(batch.step);
    backend.forward(0, staged.q(), staged.k(), staged.v(), staged.out());
    staged.synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double first = once();
  if (first > 1.0) return first;
  double best = once();
  double spent = first + best;
  for (int i = 0; i < 50 && spent < 0.3; ++i) {
    const double t = once();
    best = std::min(best, t);
    spent += t;
  }
  return best;
}

void time_backend(const std::string& backend, const AttentionShape& shape, CheckReport& report) {
  auto instance = create_attention_backend(backend, shape, {});
  const TimingSizes sizes = timing_sizes(instance->device());
  {
    RandomBatch prefill = make_random_batch(shape, {{sizes.prefill_tokens, 0}}, 11);
    const double s = time_forward(*instance, prefill);
    const double n = sizes.prefill_tokens;
    report.prefill_tokens_per_s = n / s;
    // Causal: n(n+1)/2 scores per head, 2 FLOPs per multiply-add, Q.K^T and P.V.
    report.prefill_gflops = 4.0 * (n * (n + 1) / 2) * shape.head_dim * shape.num_heads / s / 1e9;
  }
  {
    std::vector<SequenceSpec> specs(sizes.decode_batch, SequenceSpec{1, sizes.decode_context - 1});
    RandomBatch decode = make_random_batch(shape, specs, 12);
    const double s = time_forward(*instance, decode);
    report.decode_tokens_per_s = sizes.decode_batch / s;
    const double kv_bytes = 2.0 * sizes.decode_batch * sizes.decode_context * shape.num_kv_heads *
                            shape.head_dim * dtype_size(shape.kv_dtype);
    report.decode_kv_gb_per_s = kv_bytes / s / 1e9;
  }
  {
    RandomBatch latency = make_random_batch(shape, {SequenceSpec{1, sizes.latency_context - 1}}, 13);
    report.decode_latency_tokens_per_s = 1.0 / time_forward(*instance, latency);
  }
  report.timed = true;
}

int64_t peak_rss_bytes() {
  struct rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

}  // namespace

CheckReport run_backend_check(const std::string& backend, const AttentionShape& shape, bool timing) {
  CheckReport report;
  report.backend = backend;
  report.shape = shape.to_string();
  report.tolerance = tolerance_for(shape.kv_dtype).max_abs_error;
  try {
    // Prefill: odd lengths, a cached prefix crossing pages, a sequence from scratch, one decode row.
    const ErrorStats prefill = check_batch(backend, shape, {{17, 5}, {3, 130}, {64, 0}, {1, 9}}, 1);
    // Decode: one new token per sequence over paged KV of varied lengths.
    const ErrorStats decode = check_batch(backend, shape, {{1, 0}, {1, 7}, {1, 16}, {1, 130}, {1, 301}}, 2);
    report.prefill_max_abs_error = prefill.max_abs;
    report.prefill_max_rel_error = prefill.max_rel;
    report.decode_max_abs_error = decode.max_abs;
    report.decode_max_rel_error = decode.max_rel;
    report.passed = prefill.max_abs <= report.tolerance && decode.max_abs <= report.tolerance;
    if (report.passed && timing) time_backend(backend, shape, report);
  } catch (const std::exception& e) {
    report.passed = false;
    report.error = e.what();
  }
  report.peak_rss_bytes = peak_rss_bytes();
  return report;
}

int check_attention_child_main(const std::string& backend, const AttentionShape& shape, bool timing,
                               int cuda_device) {
  CheckReport report;
  if (cuda_device >= 0) {
    try {
      bind_cuda_device(cuda_device);
    } catch (const std::exception& e) {
      report.backend = backend;
      report.shape = shape.to_string();
      report.error = e.what();
      std::cout << to_json(report).dump() << std::endl;
      return 2;
    }
  }
  report = run_backend_check(backend, shape, timing);
  std::cout << to_json(report).dump() << std::endl;
  if (!report.error.empty()) return 2;
  return report.passed ? 0 : 1;
}

// ---- The parent side ----------------------------------------------------------------------------

namespace {

std::vector<std::string> child_arguments(const std::string& executable, const std::string& backend,
                                         const AttentionShape& shape, bool timing, int cuda_device) {
  std::vector<std::string> args = {executable,
                                   "__check-attention",
                                   "--backend", backend,
                                   "--heads", std::to_string(shape.num_heads),
                                   "--kv-heads", std::to_string(shape.num_kv_heads),
                                   "--head-dim", std::to_string(shape.head_dim),
                                   "--kv-dtype", std::string(dtype_name(shape.kv_dtype)),
                                   "--page-size", std::to_string(shape.page_size),
                                   "--scale", fmt::format("{}", shape.scale)};
  if (timing) args.push_back("--timing");
  if (cuda_device >= 0) {
    args.push_back("--cuda-device");
    args.push_back(std::to_string(cuda_device));
  }
  // The registry's values that differ from their defaults, so that a value a test set in this
  // process (not in the environment) reaches the child too.
  for (std::string& a : switch_arguments(switches())) args.push_back(std::move(a));
  return args;
}

}  // namespace

ValidationOutcome validate_in_child(const std::string& backend, const AttentionShape& shape,
                                    const ChildOptions& options) {
  const std::string executable = options.executable.empty() ? "/proc/self/exe" : options.executable;
  const ChildRun run =
      run_child_process(child_arguments(executable, backend, shape, options.timing, options.cuda_device), options.timeout_s);
  ValidationOutcome outcome;
  const auto parse = [](const std::string& line) { return check_report_from_json(nlohmann::json::parse(line)); };
  if (auto verdict = read_child_report(run, options.timeout_s, parse, outcome.report)) {
    outcome.status = verdict->status;
    outcome.detail = std::move(verdict->detail);
    return outcome;
  }
  const CheckReport& r = outcome.report;
  if (!r.error.empty()) {
    outcome.status = CheckStatus::kError;
    outcome.detail = r.error;
  } else if (!r.passed) {
    outcome.status = CheckStatus::kMismatch;
    outcome.detail = fmt::format("max abs error prefill {:.3g}, decode {:.3g} > tolerance {:.3g}",
                                 r.prefill_max_abs_error, r.decode_max_abs_error, r.tolerance);
  } else {
    outcome.status = CheckStatus::kPass;
    outcome.detail = fmt::format("max abs error prefill {:.3g}, decode {:.3g} <= {:.3g}",
                                 r.prefill_max_abs_error, r.decode_max_abs_error, r.tolerance);
  }
  return outcome;
}

}  // namespace spindle::attn
