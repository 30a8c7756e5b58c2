// The on-disk cache of the CUDA FP8 prefill entries' checks (kernels/cuda/fp8_linear_registry.h),
// so that `--fp8-prefill-kernel auto` checks and times the entries once per build, GPU, library
// versions and weight shape instead of at every start, as the attention backends'
// (attn/select/validation_cache.h) and the CPU linear kernels' (kernels/cpu/select/linear_selection.h)
// selections keep theirs. Plain C++ (no CUDA types): built on every machine, so that its key and
// files are tested where no GPU is.
//
// One JSON file per weight shape, <dir>/fp8-prefill-<hash of key>.json =
//   {"key": KEY, "outcomes": {ENTRY: {"passed", "max_error", "tolerance", "seconds",
//                                     "unsupported_reasons"}}}
// KEY = make_key(...) + ";shape=" + the shape ("OUTxIN:MODE", Fp8LinearShape::to_string: the
// sizes and the scale kind, tensor / channel / block128). make_key holds the build id, the device
// fingerprint (the CPU's and the bound GPU's name and compute capability, startup's
// cache_fingerprint), the GPU as the loading process sees it, the versions of the libraries the
// entries run on (cuBLASLt, cuBLAS, the CUDA runtime and driver) and the check's row count and
// timing repetitions. A changed key means another file, so the entries are checked again; a
// corrupt or foreign file is ignored with a warning and rewritten.
// Kept: outcomes that are verdicts (a pass with its timing, a failed tolerance, an entry
// unavailable for its reasons). Not kept: a check that ended in an error (an exception, often
// transient: out of memory while another process held the GPU), nor a pass without a timing.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spindle::kernels {

// One entry's check on one shape without its names (Fp8PrefillCheck in fp8_linear_registry.h adds
// them); max_error is the max over the checked outputs of |y - ref| / S.
struct Fp8PrefillOutcome {
  std::vector<std::string> unsupported_reasons;  // not empty: not run
  bool passed = false;
  double max_error = 0;
  double tolerance = 0;
  double seconds = 0;  // per forward at the key's rows; 0 when not timed
  std::string error;   // the check could not run (never cached)
  bool operator==(const Fp8PrefillOutcome&) const = default;
};
nlohmann::json to_json(const Fp8PrefillOutcome& outcome);
// Throws (nlohmann's exceptions) on a missing or mistyped field.
Fp8PrefillOutcome fp8_prefill_outcome_from_json(const nlohmann::json& j);

// Checks entry `kernel` on `shape` (the shape's to_string()).
using Fp8PrefillCheckFn = std::function<Fp8PrefillOutcome(const std::string& kernel, const std::string& shape)>;

class Fp8PrefillCache {
 public:
  // key_prefix: make_key's.
  Fp8PrefillCache(std::filesystem::path dir, std::string key_prefix);
  // gpu: the device as the loading process reads it ("NVIDIA H100 80GB HBM3 sm90");
  // library_versions: "cublaslt=130100;cublas=...;cudart=...;driver=..." (fp8_prefill_library_versions()).
  static std::string make_key(std::string_view build_id, std::string_view device_fingerprint, std::string_view gpu,
                              std::string_view library_versions, int64_t rows, int timing_reps);

  std::filesystem::path path_for(std::string_view shape) const;
  // The cached outcome of `kernel` on `shape`, when its file holds this key and that entry.
  std::optional<Fp8PrefillOutcome> find(std::string_view shape, const std::string& kernel);
  // Remembers a verdict (see above; others are ignored) and rewrites the shape's file atomically
  // (a failure is logged, never fatal).
  void store(std::string_view shape, const std::string& kernel, const Fp8PrefillOutcome& outcome);

  // Answers from the files where it can, asks `inner` for the rest and stores its verdicts. The
  // cache must outlive the returned function.
  Fp8PrefillCheckFn wrap(Fp8PrefillCheckFn inner);
  int num_hits() const { return num_hits_; }
  int num_misses() const { return num_misses_; }

  // True for what store() keeps.
  static bool cacheable(const Fp8PrefillOutcome& outcome);

 private:
  std::map<std::string, Fp8PrefillOutcome>& outcomes(std::string_view shape);
  std::string shape_key(std::string_view shape) const;

  std::filesystem::path dir_;
  std::string key_prefix_;
  std::map<std::string, std::map<std::string, Fp8PrefillOutcome>, std::less<>> loaded_;  // by shape
  int num_hits_ = 0;
  int num_misses_ = 0;
};

}  // namespace spindle::kernels
