// Small-batch products with FP8 E4M3 weights (issue 47, the decode half): y [rows, out] =
// x [rows, in] . dequant(W)^T (+ bias), W [out, in] e4m3 bytes row-major (util/fp8.h), x bf16
// [rows, in], products and sums in f32, the weight converted in registers (cvt e4m3x2 -> f16x2,
// exact) and never written back: a decode step reads 1 byte per weight instead of bf16's 2.
//
// Scales (dequant(W)[o, i] = W[o, i] * s):
//   kPerTensor   s = scale[0]
//   kPerChannel  s = scale[o]                                 (compressed-tensors "channel")
//   kBlock128    s = scale[(o / 128) * ceil(in / 128) + i / 128]  (quant_method "fp8",
//                weight_block_size [128, 128]; `weight_scale_inv` is this multiplier)
//
// Shape of the work: gemv16.h's (one warp per output row, 16-byte streaming loads of W, several in
// flight, x through the cache), 16 weights per load. Per-tensor and per-channel scales multiply the
// warp's sum once; a block scale multiplies each 16-weight partial sum (16 weights never straddle
// a 128-column block). Each y[r, o] has the same bits whatever `rows` is (row r's sums do not
// depend on the other rows).
//
// C++17 (included by .cu files). Every pointer is device memory of the current device.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace spindle::kernels::cuda {

enum class Fp8Scale { kPerTensor, kPerChannel, kBlock128 };

inline constexpr int64_t kGemvFp8MaxRows = 8;
inline constexpr int64_t kFp8ScaleBlock = 128;

// The floats `scale` holds for a weight [out, in] in `mode`.
int64_t fp8_scale_count(Fp8Scale mode, int64_t out, int64_t in);

// True when launch_gemv_fp8 takes this shape: 1 <= rows <= kGemvFp8MaxRows, in % 16 == 0, w and x
// 16-byte aligned.
bool gemv_fp8_supports(int64_t rows, int64_t in, const void* w, const void* x);

// y[r, o] = sum_i x[r, i] * dequant(W)[o, i] (+ bias[o] when bias is not null), f32 [rows, out].
// Throws spindle::Error (a CUDA error) when !gemv_fp8_supports(...) or out <= 0.
void launch_gemv_fp8(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x_bf16, int64_t rows,
                     int64_t in, int64_t out, const float* bias, float* y, cudaStream_t stream);

// ---- 1 to 32 rows on the tensor cores (issue 47: decode at C = 9..32) -------------------------
// launch_gemv_fp8_mma: the same product (the same scale modes, y f32 [rows, out] overwritten), for
// 1 <= rows <= kGemvFp8MmaMaxRows, each weight byte read once per launch. Work shape
// (gemv_fp8_mma.cu): the weight is the A operand of bf16 mma.m16n8k16 (16 outputs x 16 inputs), x
// the B operand (8 batch rows per n-tile, ceil(rows / 8) tiles); a warp owns 16 outputs and
// streams its weight rows through a cp.async ring in shared memory (Fp8MmaLoad), converts e4m3 to
// bf16 in registers (exact: every e4m3 value is a bf16 value) and multiplies with f32
// accumulation. The input dimension is cut into `splits` ranges of 128 columns (grid.y) so that the
// short-and-wide shapes (o, down) still fill the device; each range's partial sums go to
// `workspace` and the last block of an output group to finish adds them in range order (the bits
// do not depend on which block finishes last) and writes y. Block scales multiply each
// 128-column partial sum (a warp's 16 outputs share one block row); per-tensor and per-channel
// scales multiply the final sum once. The e4m3 NaN codes (0x7F, 0xFF) are not weights: they are
// read as +-480 (no checkpoint holds them; fp8_e4m3 quantizers saturate).
inline constexpr int64_t kGemvFp8MmaMaxRows = 32;

// How launch_gemv_fp8_mma's warps copy their weight rows (cp.async, L2 only) into shared memory
// (results compared in bench_gemv_fp8):
//   kLanePieces  each lane copies the 16-byte pieces its own fragments need: one copy instruction
//                covers 8 rows x 64 contiguous bytes (the pattern of the former bf16 gemv_mma,
//                which read W at 39-67% of the copy bandwidth, bench/results/2026-12-03-h200-gemv-mma);
//                a ring of 4 units of 128 columns per warp, 3 in flight (32 KiB per block).
//   kRowSpans    one copy instruction covers 2 rows x 256 contiguous bytes; the fragments are read
//                back from a swizzled [16 x 256] tile per stage; 3 stages of 2 units per warp, 2 in
//                flight (48 KiB of shared memory per block).
//   kBlockStages one pipeline per block of 8 warps (128 outputs): a stage is the block's 128 rows x
//                128 bytes (each copy instruction 4 rows x 128 contiguous bytes, L2 asked for 256)
//                and x's rows x 128 columns, copied once per block into shared memory (x read once
//                per 128 outputs instead of once per 16 through L1); 4 stages, 3 in flight (72-96
//                KiB per block, 2 blocks per SM); the first weight copies issued before the PDL wait.
//   kBlockPairs  kBlockStages with 4 warps of 2 m-tiles (32 outputs) each: every x fragment loaded
//                from shared memory serves 2 mma (half the shared-memory loads of x at 17-32 rows).
//                gemv_fp8_mma.cu's comment has the analysis and predictions.
enum class Fp8MmaLoad { kLanePieces, kRowSpans, kBlockStages, kBlockPairs };

// The load Fp8Linear serves `rows` rows with: kBlockStages up to 16 rows, kBlockPairs above (chosen
// on paper, 2026-12-08: gemv_fp8_mma_block.cu's analysis; bench_gemv_fp8 times all four loads, and the
// losers of its first run on a GPU are to be deleted with their code; SPINDLE_FP8_MMA_LOAD overrides
// it in Fp8Linear until then).
Fp8MmaLoad gemv_fp8_mma_load_for(int64_t rows);

// Scratch of launch_gemv_fp8_mma: partial sums and one counter per group of 64 outputs. The
// counters must be zero before the first launch (fp8_mma_workspace_init); every launch leaves
// them zero. One workspace serves one stream (launches in order).
struct Fp8MmaWorkspace {
  float* partial = nullptr;      // capacity `partial_floats`
  int64_t partial_floats = 0;
  uint32_t* counters = nullptr;  // capacity `counter_count`
  int64_t counter_count = 0;
};
// Bytes of a workspace for weights of at most max_out outputs on the current device, and the
// layout of such a buffer (base 256-byte aligned; counters zeroed, synchronously: call at load).
int64_t fp8_mma_workspace_bytes(int64_t max_out);
Fp8MmaWorkspace fp8_mma_workspace_init(void* base, int64_t bytes, int64_t max_out);

// True when launch_gemv_fp8_mma takes this shape: 1 <= rows <= kGemvFp8MmaMaxRows, in % 16 == 0,
// w and x 16-byte aligned.
bool gemv_fp8_mma_supports(int64_t rows, int64_t in, const void* w, const void* x);

// The number of 128-column ranges launch_gemv_fp8_mma cuts `in` into for `rows` rows where the
// device holds `resident` of its blocks at once (SMs x blocks per SM at the kernel's registers and
// shared memory): as many as keep every block of the grid resident, floor(resident /
// ceil(out / 64)), so that the whole product is one wave (a second, partial wave would stream its
// weights at a fraction of the bandwidth); 1 for the tall shapes; at most min(ceil(in / 128), 64),
// and at most in / (16 rows), so that the partial sums (4 S rows out bytes, written and read back
// through L2) stay within a quarter of the weight's bytes (k / v projections: 1024 x 4096).
// Output groups are of the load's block: 64 outputs, 128 for kBlockStages and kBlockPairs.
int64_t gemv_fp8_mma_splits(int64_t rows, int64_t out, int64_t in, int64_t resident,
                            Fp8MmaLoad load = Fp8MmaLoad::kLanePieces);
// `resident` for a product of `rows` rows in `mode` on the current device (cached per device).
int64_t gemv_fp8_mma_resident_blocks(int64_t rows, Fp8Scale mode, Fp8MmaLoad load = Fp8MmaLoad::kLanePieces);

// y[r, o] = sum_i x[r, i] * dequant(W)[o, i] (+ bias[o]). splits: 0 = gemv_fp8_mma_splits(...) on
// the current device (a bench may force one); lowered to what `workspace` holds (1 needs none).
// Throws spindle::Error (a CUDA error) when !gemv_fp8_mma_supports(...), out <= 0 or scale is null.
void launch_gemv_fp8_mma(const uint8_t* w, const float* scale, Fp8Scale mode, const uint16_t* x_bf16, int64_t rows,
                         int64_t in, int64_t out, const float* bias, float* y, const Fp8MmaWorkspace& workspace,
                         cudaStream_t stream, int64_t splits = 0, Fp8MmaLoad load = Fp8MmaLoad::kLanePieces);

}  // namespace spindle::kernels::cuda
