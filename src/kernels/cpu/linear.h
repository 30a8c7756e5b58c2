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
// Implementations (names for make_named_linear_kernel; see linear.cc for the policy):
//   reference    plain loops, float64 accumulation: the ground truth for tests.
//   avx2         AVX2+FMA register-tiled dot products straight from the stored weights (bf16 is
//                widened to f32 in registers), f32 accumulation; rows of W split over the
//                ThreadPool. Memory-bound decode path (small m).
//   avx512       the same with AVX-512F/BW/VL.
//   avx512_bf16  bf16 weights only: x ROUNDED TO BF16 (as amx_bf16), AVX512-BF16 dot products
//                (vdpbf16ps: 32 bf16 pairs per instruction, W used as stored), f32 accumulation;
//                the avx512 kernel's tiling and thread split. The direct kernel of bf16
//                activations on CPUs with AVX512-BF16 but no AMX (Zen 4).
//   amx          bf16 weights only: AMX-BF16 tiles with W as the A operand read in place and x
//                split into three bf16 parts (hi + mid + lo, exact to 2^-27 relative), so the
//                products are f32-accurate like avx2/avx512 while the tile unit keeps up with
//                memory for m up to 64 (the f32 FMA kernels are compute-bound from m ~ 8).
//   amx_bf16     the amx kernel with x ROUNDED TO BF16 (one part instead of three: a third of
//                the tile work), f32 accumulation: the same product as onednn_bf16.
//   onednn_f32   prefill path: bf16 weights are widened block by block (~8 MiB of f32 per block)
//                into a per-thread buffer and multiplied by oneDNN's f32 matmul (its own OpenMP
//                threads; the ThreadPool is not used). f32 weights go to oneDNN directly.
//   onednn_bf16  oneDNN bf16 matmul (AMX / AVX512-BF16): x is ROUNDED TO BF16 first (relative
//                error ~4e-3), f32 accumulation and output. bf16 weights only.
//   auto         what make_linear_kernel returns: the direct kernel for m <= kLinearDirectMaxRows
//                (bf16 weights with AMX: avx512 for m < kLinearAmxMinRows, amx from there; with
//                LinearOptions::allow_bf16_activations avx512 for m < kLinearAmxBf16MinRows and
//                amx_bf16 from there; with allow_bf16_activations on a CPU with AVX512-BF16 and
//                no AMX avx512_bf16 from kLinearBf16DotMinRows rows; else avx512 > avx2), above that amx_bf16 (bf16
//                activations on an AMX CPU) or oneDNN (onednn_bf16 with allow_bf16_activations on a CPU that has
//                AVX512-BF16 but no AMX, else onednn_f32).
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
  // Exactness first: by default every path accumulates f32 products of the f32 activations
  // (relative error ~1e-6 of sum |x||w|). When true AND the CPU has AMX-BF16 or AVX512-BF16 AND
  // the weights are bf16, large-m products use oneDNN's bf16 matmul, which rounds x to bf16
  // (relative error ~4e-3) for 2-4x the f32 rate (2.6-3.3 TFLOP/s on a 16-core AMX Xeon), and on a
  // CPU with AMX the direct kernel's amx rows (kLinearAmxMinRows <= m <= kLinearDirectMaxRows)
  // round x to bf16 as well (amx_bf16). Fewer rows (batch-1 decode) stay f32-exact.
  bool allow_bf16_activations = false;
};

// Batches up to this many rows take the direct kernel in "auto". Measured (bench/linear.cc,
// crossover table, bench/results/2026-11-29-linear-cpu-epyc.md): on a 16-core AVX-512 Xeon the
// direct kernel beats widening + oneDNN f32 up to m = 256 (912 vs 445 GFLOP/s at m = 64); on a
// 2-core AVX2 EPYC it is slightly ahead at m = 64 (153 vs 146) and even from m = 128.
inline constexpr int64_t kLinearDirectMaxRows = 64;
// With bf16 activations allowed on a CPU with AVX512-BF16 but no AMX (Zen 4), "auto" runs
// avx512_bf16 from this many rows (up to kLinearDirectMaxRows) and the exact avx512 below it.
// 1: every row count, so a decode step and a speculative verify compute each row alike. Measured
// on 2 Zen 4 cores (Llama-3.2-1B shape, bench/results/2026-12-04-devvm-zen4): a 16-row decode step
// 291-340 ms with avx512 (f32 FMAs, compute-bound) -> 200-228 ms; at 1 row within the noise of the
// shared VM (the kernel's own prefetch rule took its 1-row step from a median 112 to 94 ms).
// linear_bf16_dot_min_rows() is the registry's value (util/switches.h: this default, or
// SPINDLE_LINEAR_BF16_DOT_MIN_ROWS until the linear registry measures it per machine).
inline constexpr int64_t kLinearBf16DotMinRows = 1;
int64_t linear_bf16_dot_min_rows();
// With AMX and bf16 weights, "auto" runs the amx kernel from this many rows (up to
// kLinearDirectMaxRows) and avx512 below it. Measured (bench_linear's rows sweep, 16-core
// Sapphire Rapids, bench/results/2026-12-01-cpu-linear.md): avx512 reads W at 100-120 GB/s up
// to m = 4, then its FMAs fall behind (79-89 GB/s at m = 8, 59-67 at 12, 46-52 at 16); amx holds
// 65-87 GB/s (three runs) from m = 1 to 16, then 48-51 at 24-32 and 24 at 64, still the fastest
// kernel there. At m = 8 avx512 is still slightly ahead, from m = 12 amx by 15-40%.
inline constexpr int64_t kLinearAmxMinRows = 9;
// With bf16 activations allowed (amx_bf16: x rounded to bf16, one tile product per W tile), "auto"
// runs amx_bf16 from this many rows and avx512 below it. Kept at 9: a 1-row decode and a
// speculative verify of up to 8 rows then compute each row alike (f32-exact), so greedy
// speculation stays identical to plain decoding. From m = 2 amx_bf16 is faster (a 5-row kjv-tiny
// verify 1.65-1.68x a decode step instead of 2.08-2.14x), but the served A/B on the Xeon gave no
// clear gain (one round: draft 1.09x vs 1.18x, n-gram 1.28x vs 1.14x) and 1 of 8 greedy kjv texts
// differed between draft speculation and plain decoding (bench/results/2026-12-02-xeon-cpu-2/run2).
// linear_amx_bf16_min_rows() is the registry's value (util/switches.h: this default, or
// SPINDLE_LINEAR_AMX_BF16_MIN_ROWS until the linear registry measures it per machine).
inline constexpr int64_t kLinearAmxBf16MinRows = 9;
int64_t linear_amx_bf16_min_rows();
// With bf16 activations allowed and AMX usable, products of more than kLinearDirectMaxRows rows
// run amx_bf16 too, not oneDNN's bf16 matmul (16 Xeon threads, 1B prefill: 1277 vs 785 tok/s;
// 2 cores, m = 512: bench/results/2026-12-02-xeon-cpu-2/; the former SPINDLE_LINEAR_BF16_LARGE).

class LinearKernel {
 public:
  virtual ~LinearKernel() = default;
  // y[m, out] = x[m, in] . W^T + bias (bias: f32 [out] or null). Overwrites y.
  // pool: workers for the direct kernels (null: the calling thread only); oneDNN paths use
  // oneDNN's own threads and must not be called from inside pool->parallel_for.
  virtual void forward(const float* x, int64_t m, float* y, ThreadPool* pool, const float* bias = nullptr) = 0;
  // forward(), with the kernel that a call of `choose_rows` rows would take where a kernel picks one
  // by the row count ("auto": avx512 below kLinearAmxMinRows / kLinearAmxBf16MinRows, amx from
  // there; each of them computes a row alike whatever m, tested). A speculative verify of B
  // sequences passes B, so that its rows get the bits of a B-row decode step's. Default: forward().
  virtual void forward_choosing_for(const float* x, int64_t m, int64_t choose_rows, float* y, ThreadPool* pool,
                                    const float* bias = nullptr) {
    (void)choose_rows;
    forward(x, m, y, pool, bias);
  }
  virtual const char* name() const = 0;
};

// The fastest correct implementation for this machine and weight (checked with CpuInfo); a
// quantized weight gets make_quant_linear_kernel's default. Throws spindle::Error for a plain
// weight that is not kF32/kBF16, or non-positive sizes / null data.
std::unique_ptr<LinearKernel> make_linear_kernel(const LinearWeight& weight, const LinearOptions& options = {});
// Plain loops with double accumulation: the ground truth for tests.
std::unique_ptr<LinearKernel> make_reference_linear_kernel(const LinearWeight& weight);

// Quantized weights (weight.quantized()): y = quantized x . W^T (+ bias) through
// quant_linear_forward on `isa`, which must be supported on this CPU (throws naming the reasons
// otherwise). Its name is "q8_0/avx512_vnni" and so on.
std::unique_ptr<LinearKernel> make_quant_linear_kernel(const LinearWeight& weight, QuantKernelIsa isa);
// The ISA "auto" runs quantized weights on for decode rows: the best supported of avx512_vnni >
// avx_vnni > avx2 (nullopt when none is: no AVX2). Until the linear-kernel registry measures it.
std::optional<QuantKernelIsa> default_quant_decode_isa();
// From this many rows "auto" runs quantized weights on amx_int8 where it is supported (it computes
// the same integers and the same f32 epilogue as avx512_vnni, so a row's outputs do not depend on
// the choice). A placeholder the linear-kernel registry replaces by a measured crossover.
inline constexpr int64_t kQuantAmxMinRows = 16;

// Every implementation name, in the order above ("reference", ..., "auto").
std::vector<std::string> linear_kernel_names();
// Why `name` cannot run this weight on this CPU; empty when it can. Unknown names get a reason
// that lists the known ones.
std::string linear_kernel_unsupported_reason(std::string_view name, const LinearWeight& weight,
                                             const LinearOptions& options = {});
// One implementation by name, for tests and benchmarks. Throws spindle::Error with the reason
// when it is unsupported here.
std::unique_ptr<LinearKernel> make_named_linear_kernel(std::string_view name, const LinearWeight& weight,
                                                       const LinearOptions& options = {});

// The OpenMP threads oneDNN's products (and the loops around them) use when called from the
// calling thread (omp_set_num_threads is per thread): a DP rank's engine thread sets its core
// share's size, so its products stay on the share (new OpenMP threads inherit the caller's CPU
// affinity). num_threads >= 1.
void set_linear_threads_for_calling_thread(int num_threads);

}  // namespace spindle::kernels::cpu
