// Linear layers on the CPU: y = x . W^T (+ bias), activations f32, weights in their stored dtype.
//
// Weights are row-major [out_features, in_features], exactly as Hugging Face stores nn.Linear
// (and the embedding / LM head [vocab, hidden]). x is [m, in_features] f32 and y is
// [m, out_features] f32, both contiguous row-major. The kernels read the weights in place (they
// may be mmap'd safetensors); nothing prepacks or copies them whole.
//
// LinearKernel is created once per weight (ISA choice, oneDNN primitives per batch-size bucket
// happen in the constructor or lazily) and reused for every forward. forward() may be called
// from several threads at once.
//
// Implementations (registered in kernels/cpu/linear_registry.h, which states each one's
// availability; chosen per weight shape and row class by measurement, kernels/cpu/select):
//   reference    plain loops, float64 accumulation: the ground truth for tests (never chosen).
//   avx2         AVX2+FMA register-tiled dot products straight from the stored weights (bf16 is
//                widened to f32 in registers), f32 accumulation; rows of W split over the
//                ThreadPool. Memory-bound decode path (small m).
//   avx512       the same with AVX-512F/BW/VL.
//   avx512_bf16  bf16 weights only: x ROUNDED TO BF16 (as amx_bf16), AVX512-BF16 dot products
//                (vdpbf16ps: 32 bf16 pairs per instruction, W used as stored), f32 accumulation;
//                the avx512 kernel's tiling and thread split.
//   amx          bf16 weights only: AMX-BF16 tiles with W as the A operand read in place and x
//                split into three bf16 parts (hi + mid + lo, exact to 2^-27 relative), so the
//                products are f32-accurate like avx2/avx512.
//   amx_bf16     the amx kernel with x ROUNDED TO BF16 (one part instead of three: a third of
//                the tile work), f32 accumulation: the same product as onednn_bf16.
//   onednn_f32   bf16 weights are widened block by block (~8 MiB of f32 per block) into a
//                per-thread buffer and multiplied by oneDNN's f32 matmul (its own OpenMP threads;
//                the ThreadPool is not used). f32 weights go to oneDNN directly.
//   onednn_bf16  oneDNN bf16 matmul (AMX / AVX512-BF16): x is ROUNDED TO BF16 first (relative
//                error ~4e-3), f32 accumulation and output. bf16 weights only.
// Every kernel computes a row of x alike whatever m (tested), so a kernel chosen by row count
// gives a speculative verify's rows the bits of a decode step's (forward_choosing_for).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/quant_linear.h"
#include "util/dtype.h"

namespace spindle {
class ThreadPool;
}

namespace spindle::kernels::cpu {

// A linear weight W [out_features, in_features]: plain (F32 / BF16 rows read in place at `data`)
// or quantized (a ggml block type repacked by repack_quant_weight: `quant` set, `data` null,
// dtype unused, out_features / in_features equal quant->n / quant->k). Either way the caller owns
// the bytes, which outlive every kernel made of this descriptor.
struct LinearWeight {
  const void* data = nullptr;  // plain: [out_features, in_features] of dtype (kF32 or kBF16)
  DType dtype = DType::kBF16;
  int64_t out_features = 0;
  int64_t in_features = 0;
  const PackedQuantWeight* quant = nullptr;  // quantized: the repacked weight (quant->type is its QuantType)

  bool quantized() const { return quant != nullptr; }
  static LinearWeight from_quant(const PackedQuantWeight& packed) {
    return LinearWeight{nullptr, DType::kF32, packed.n, packed.k, &packed};
  }
};

struct LinearOptions {
  // Exactness first: by default every kernel accumulates f32 products of the f32 activations
  // (relative error ~1e-6 of sum |x||w|). When true the kernels that round x to bf16
  // (avx512_bf16, amx_bf16, onednn_bf16: relative error ~4e-3, 2-4x the f32 rate) are candidates
  // too; without it their availability says why not.
  bool allow_bf16_activations = false;
};

// The row classes a choice covers: products of up to kLinearDecodeMaxRows rows are "decode" rows
// (a decode step of that many sequences, or a speculative verify choosing for them), more are
// "prefill" rows. Where no measured choice is given (make_linear_kernel) the registry's
// priorities pick one kernel per class.
inline constexpr int64_t kLinearDecodeMaxRows = 64;

class LinearKernel {
 public:
  virtual ~LinearKernel() = default;
  // y[m, out] = x[m, in] . W^T + bias (bias: f32 [out] or null). Overwrites y.
  // pool: workers for the direct kernels (null: the calling thread only); oneDNN paths use
  // oneDNN's own threads and must not be called from inside pool->parallel_for.
  virtual void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias = nullptr) = 0;
  // forward(), with the kernel that a call of `choose_rows` rows would take where a kernel picks one
  // by the row count (the measured choice of kernels/cpu/select: a table of row thresholds; each
  // kernel computes a row alike whatever m, tested). A speculative verify of B sequences passes
  // B, so that its rows get the bits of a B-row decode step's. Default: forward().
  virtual void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                                    const float* bias = nullptr) {
    (void)choose_rows;
    forward(x, m, y, pool, bias);
  }
  virtual const char* name() const = 0;
};

// The registry's priority choice for this machine and weight, without measurement (tests,
// benchmarks; a server measures: kernels/cpu/select): the highest-priority available decode
// kernel up to kLinearDecodeMaxRows rows, the highest-priority prefill kernel above.
// Throws spindle::Error for a weight that is not kF32/kBF16 or has non-positive sizes / null data.
std::unique_ptr<LinearKernel> make_linear_kernel(const LinearWeight& weight, const LinearOptions& options = {});
// Plain loops with double accumulation: the ground truth for tests.
std::unique_ptr<LinearKernel> make_reference_linear_kernel(const LinearWeight& weight);

// Quantized weights (weight.quantized()): y = quantized x . W^T (+ bias) through
// quant_linear_forward on `isa`, which must be supported on this CPU (throws naming the reasons
// otherwise). Its name is "q8_0/avx512_vnni" and so on. Registered per ISA in linear_registry.h.
std::unique_ptr<LinearKernel> make_quant_linear_kernel(const LinearWeight& weight, QuantKernelIsa isa);

// Every implementation name: "reference" and the registered kernels.
std::vector<std::string> linear_kernel_names();
// Why `name` cannot run this weight on this CPU; empty when it can. Unknown names get a reason
// that lists the known ones.
std::string linear_kernel_unsupported_reason(std::string_view name, const LinearWeight& weight,
                                             const LinearOptions& options = {});
// One implementation by name, for tests and benchmarks. Throws spindle::Error with the reason
// when it is unsupported here.
std::unique_ptr<LinearKernel> make_named_linear_kernel(std::string_view name, const LinearWeight& weight,
                                                       const LinearOptions& options = {});

// Checks a weight a kernel is made for (dtype kF32 / kBF16, positive sizes, data); throws naming it.
void check_linear_weight(const LinearWeight& weight);

// The OpenMP threads oneDNN's products (and the loops around them) use when called from the
// calling thread (omp_set_num_threads is per thread): a DP rank's engine thread sets its core
// share's size, so its products stay on the share (new OpenMP threads inherit the caller's CPU
// affinity). num_threads >= 1.
void set_linear_threads_for_calling_thread(int num_threads);

}  // namespace spindle::kernels::cpu
