// The CUDA FP8 prefill products as registry entries (DESIGN.md section 7; issue 47 item 2): the
// smallest honest CUDA counterpart of kernels/cpu/linear_registry.h. Each entry has a name, its
// accuracy contract, availability reasons (device, cuBLASLt, shape) and a factory; a check runs an
// entry on random weights of a shape against a float64 product and times it, and a chooser keeps
// the fastest entry that passed. Products of at most kFp8StreamMaxRows rows always run on the
// streaming decode products (gemv_fp8, gemv_fp8_mma: fp8_linear.h); these entries serve the rows above.
//
//   fp8_w8a16                W8A16: the weight converted to bf16 exactly (codes, or hi + lo), x
//                            split to ~16 bits (fp8_linear.h); tolerance kW8a16Tolerance
//   cublaslt_fp8             W8A8 on the FP8 tensor cores (fp8_lt_linear.h); x quantized per token
//                            (per 128 columns too for block weights)
//   cublaslt_fp8_fast_accum  the same with cuBLASLt's fast accumulation
//
// Tolerances (per output, |y - ref| <= tolerance * S, ref = the float64 product over the f32 x and
// the dequantized weight, S = sum_i |x_i w_i| + |bias|; tests/cuda/cuda_fp8_lt_test.cc derives the
// W8A8 parts):
//   fp8_w8a16: 1e-4 (x's split 2^-17, the block weights' hi + lo 2^-18, f32 accumulation).
//   cublaslt_fp8: 2^-4 (e4m3 rounding of each activation) + 2^-10 (the tensor cores' accumulation)
//     + 2^-9 (a bf16 output, where cuBLASLt has no f32-output algorithm: fp8_lt_linear.h).
//   cublaslt_fp8_fast_accum: 2^-4 + 2 (in / 32) 2^-13 + 2^-9.
//   (2^-4 is e4m3's rounding in its normal range; an activation below 2^-6 of its scale rounds by up
//   to 2^-10 scale absolute, which the check's random rows, scaled per token, do not reach in sum.)
//
// The checks are cached on disk (kernels/fp8_prefill_cache.h: per build, device, GPU, library
// versions, rows, repetitions and shape; cached_fp8_prefill_checker), so a second start checks and
// times nothing. Not yet: validation in a child process (a CUDA child spawned by fork+exec as
// attn/select does) and `spindle doctor`'s table; the check and the choice run in-process
// (choose_fp8_prefill_kernels), and only when CudaModelOptions::fp8_prefill_kernel is "auto".
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/fp8_prefill_cache.h"

namespace spindle::kernels::cuda {

using kernels::Fp8PrefillCache;

struct Fp8LinearShape {
  int64_t out_features = 0;
  int64_t in_features = 0;
  Fp8Scale mode = Fp8Scale::kPerChannel;
  std::string to_string() const;  // "4096x14336:block128"
  auto operator<=>(const Fp8LinearShape&) const = default;
};

// One FP8 prefill product, bound to a stream. Not thread-safe.
class Fp8PrefillProduct {
 public:
  virtual ~Fp8PrefillProduct() = default;
  // Scratch for products of up to max_rows rows with weights of at most max_in inputs, max_out
  // outputs and max_elements weights. Call at load (growing frees the old buffers).
  virtual void reserve(int64_t max_rows, int64_t max_in, int64_t max_out, int64_t max_elements,
                       bool has_block_scales) = 0;
  // y [rows, out] = x [rows, in] . dequant(w)^T (+ bias [out]); x, y f32; every pointer device memory.
  virtual void forward(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y, const float* bias) = 0;
  virtual uint64_t workspace_bytes() const = 0;
  // "" when it can run this weight shape at `rows`; else why not (a library without an algorithm).
  virtual std::string why_unsupported(const DeviceFp8Weight& w, int64_t rows) { return {}; }
};

struct Fp8PrefillDescriptor {
  std::string name;
  std::string description;
  double tolerance = 0;  // see above; fast accumulation: the bound at in = 4096 (fp8_prefill_tolerance)
  int priority = 0;      // breaks ties of the timing (within 3%)
  std::function<std::vector<std::string>(int cc_major, int cc_minor, const Fp8LinearShape&)> unsupported_reasons;
  // `linear` must outlive the product (fp8_w8a16 runs its bf16 products).
  std::function<std::unique_ptr<Fp8PrefillProduct>(CublasLinear& linear, cudaStream_t stream)> factory;
};

inline constexpr double kW8a16Tolerance = 1e-4;
inline constexpr char kFp8PrefillDefault[] = "fp8_w8a16";

// The entries, in priority order.
const std::vector<Fp8PrefillDescriptor>& fp8_prefill_kernels();
// Throws spindle::Error for an unknown name, listing the registered ones.
const Fp8PrefillDescriptor& fp8_prefill_kernel(std::string_view name);
// The entry's tolerance for a weight of in_features inputs.
double fp8_prefill_tolerance(const Fp8PrefillDescriptor& descriptor, int64_t in_features);

// One entry's check on one shape: the outcome the cache keeps (seconds: the median of the timed
// repetitions at `rows`) and the names it was checked under.
struct Fp8PrefillCheck : kernels::Fp8PrefillOutcome {
  std::string kernel;
  Fp8LinearShape shape;
  bool operator==(const Fp8PrefillCheck&) const = default;  // names too, not the outcome's alone
};

// Runs `kernel` on random weights of `shape` (e4m3 codes, scales in [1e-3, 4e-3]) and x [rows, in]
// (normal, row magnitudes 2^-4..2^4) on the current device, compares every output row at a
// strided sample of columns (and the last) with the float64 product, and times timing_reps
// forwards (0: no timing). Never throws for a failing kernel: the report says why.
Fp8PrefillCheck check_fp8_prefill_kernel(std::string_view kernel, const Fp8LinearShape& shape, int64_t rows,
                                         int timing_reps, int cc_major, int cc_minor);

// For each shape, the fastest entry that passed its check (priority within 3%); every check in
// `checks`. A shape no entry passes takes kFp8PrefillDefault (and its failed check says why).
struct Fp8PrefillChoice {
  Fp8LinearShape shape;
  std::string kernel;
};
std::vector<Fp8PrefillChoice> choose_fp8_prefill_kernels(const std::vector<Fp8LinearShape>& shapes, int64_t rows,
                                                         int timing_reps, int cc_major, int cc_minor,
                                                         std::vector<Fp8PrefillCheck>* checks = nullptr);

// One entry's check on one shape: check_fp8_prefill_kernel, or the on-disk cache's answer.
using Fp8PrefillChecker = std::function<Fp8PrefillCheck(std::string_view kernel, const Fp8LinearShape& shape)>;
// check_fp8_prefill_kernel at `rows` with timing_reps (at least 1) repetitions on the current device.
Fp8PrefillChecker direct_fp8_prefill_checker(int64_t rows, int timing_reps, int cc_major, int cc_minor);
// `inner` through `cache` (whose key must name inner's rows and repetitions: Fp8PrefillCache::make_key).
// Both must outlive the checker.
Fp8PrefillChecker cached_fp8_prefill_checker(Fp8PrefillCache& cache, Fp8PrefillChecker inner);
// The chooser above over any checker (every entry of every shape checked through it).
std::vector<Fp8PrefillChoice> choose_fp8_prefill_kernels(const std::vector<Fp8LinearShape>& shapes,
                                                         const Fp8PrefillChecker& check,
                                                         std::vector<Fp8PrefillCheck>* checks = nullptr);
// The libraries the entries run on, for the cache key: "cublaslt=VERSION (PATH);cublas=PATH;cudart=VERSION;
// driver=VERSION" (cuBLASLt's cublasLtGetVersion, or "none (why)" when it cannot be loaded; the cuBLAS
// file dlopen was given; the CUDA runtime's and driver's versions).
std::string fp8_prefill_library_versions();

}  // namespace spindle::kernels::cuda
